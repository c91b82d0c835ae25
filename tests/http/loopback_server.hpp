// SPDX-License-Identifier: Apache-2.0
#pragma once

// Loopback HTTP servers for the LLM client tests: real sockets on 127.0.0.1, scripted
// replies (whole, streamed in small pieces, cut, stalled) and a record of every request.
// The implementation (loopback_server.cpp) is the only place that sees cpp-httplib.

#include <chrono>      // milliseconds, steady_clock
#include <cstddef>     // size_t
#include <filesystem>  // path
#include <functional>  // function
#include <map>         // map
#include <memory>      // unique_ptr
#include <string>      // string
#include <utility>     // pair
#include <vector>      // vector

namespace cuda_agent::testing {

struct RecordedRequest {
  std::string method;
  /// The request target as sent: a path, or an absolute URL when sent to a proxy.
  std::string target;
  std::string body;
  /// Names in lower case.
  std::map<std::string, std::string> headers;
  std::chrono::steady_clock::time_point received_at;
};

/// One scripted answer.
struct Reply {
  enum class Ending {
    complete,  ///< the whole body, properly terminated
    drop,      ///< stop after `cut_after` body bytes and close the connection mid-body
    stall,     ///< stop after `cut_after` body bytes and go silent for `stall_for`
  };
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  /// Send the body with chunked encoding, `piece_size` bytes per write (0: one write),
  /// `piece_delay` apart.
  bool chunked = false;
  std::size_t piece_size = 0;
  std::chrono::milliseconds piece_delay{0};
  Ending ending = Ending::complete;
  std::size_t cut_after = 0;
  std::chrono::milliseconds stall_for{10'000};

  static Reply json(std::string body, int status = 200);
  static Reply json_file(const std::filesystem::path& path, int status = 200);
  /// An event stream in pieces of `piece_size` bytes (default: small enough to split
  /// lines, JSON and tool-call fragments across reads).
  static Reply events(std::string body, std::size_t piece_size = 7);
  static Reply events_file(const std::filesystem::path& path, std::size_t piece_size = 7);
  Reply&& with_header(std::string name, std::string value) &&;
};

/// An HTTP (or HTTPS) server on 127.0.0.1 and a free port, answering every POST (any
/// target) with the next queued reply, or `handler`'s answer when the queue is empty.
class LoopbackServer {
 public:
  struct Tls {
    std::filesystem::path certificate;
    std::filesystem::path private_key;
  };
  LoopbackServer();
  explicit LoopbackServer(const Tls& tls);
  ~LoopbackServer();
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  /// `http://127.0.0.1:<port>` (or https).
  [[nodiscard]] std::string url() const;
  [[nodiscard]] int port() const;
  void enqueue(Reply reply);
  void set_handler(std::function<Reply(const RecordedRequest&)> handler);
  [[nodiscard]] std::vector<RecordedRequest> requests() const;

  /// Whether this build of cpp-httplib can serve HTTPS.
  static bool tls_supported();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A bare TCP server that reads one HTTP request per connection, writes raw bytes, and
/// then resets the connection (SO_LINGER 0: an RST, not a FIN) or closes it normally.
/// For faults cpp-httplib cannot produce.
class RawServer {
 public:
  struct Script {
    std::string bytes;
    bool reset = false;
  };
  explicit RawServer(std::vector<Script> scripts);
  ~RawServer();
  RawServer(const RawServer&) = delete;
  RawServer& operator=(const RawServer&) = delete;

  [[nodiscard]] std::string url() const;
  [[nodiscard]] std::size_t connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The text of a test data file.
std::string read_file(const std::filesystem::path& path);

}  // namespace cuda_agent::testing

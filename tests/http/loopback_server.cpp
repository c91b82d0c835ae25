// SPDX-License-Identifier: Apache-2.0
#include "loopback_server.hpp"

#include <httplib.h>

#include <netinet/in.h>  // sockaddr_in, htons, INADDR_LOOPBACK
#include <sys/socket.h>  // socket, bind, listen, accept, setsockopt, shutdown
#include <unistd.h>      // close

#include <algorithm>     // min
#include <atomic>        // atomic
#include <cctype>        // tolower
#include <cerrno>        // errno
#include <deque>         // deque
#include <fstream>       // ifstream
#include <iterator>      // istreambuf_iterator
#include <mutex>         // mutex, lock_guard
#include <stdexcept>     // runtime_error
#include <string_view>   // string_view
#include <system_error>  // system_error, generic_category
#include <thread>        // thread, sleep_for

namespace cuda_agent::testing {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw std::runtime_error("cannot read test data " + path.string());
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

Reply Reply::json(std::string body, int status) {
  Reply reply;
  reply.status = status;
  reply.body = std::move(body);
  return reply;
}

Reply Reply::json_file(const std::filesystem::path& path, int status) { return json(read_file(path), status); }

Reply Reply::events(std::string body, std::size_t piece_size) {
  Reply reply;
  reply.content_type = "text/event-stream";
  reply.body = std::move(body);
  reply.chunked = true;
  reply.piece_size = piece_size;
  return reply;
}

Reply Reply::events_file(const std::filesystem::path& path, std::size_t piece_size) {
  return events(read_file(path), piece_size);
}

Reply&& Reply::with_header(std::string name, std::string value) && {
  headers.emplace_back(std::move(name), std::move(value));
  return std::move(*this);
}

// --- LoopbackServer ---------------------------------------------------------------------------

struct LoopbackServer::Impl {
  std::unique_ptr<httplib::Server> server;
  std::string scheme = "http";
  int port = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};
  mutable std::mutex mutex;
  std::deque<Reply> queue;
  std::function<Reply(const RecordedRequest&)> handler;
  std::vector<RecordedRequest> requests;

  void start() {
    server->Post(".*",
                 [this](const httplib::Request& request, httplib::Response& response) { answer(request, response); });
    server->set_keep_alive_timeout(1);
    port = server->bind_to_any_port("127.0.0.1");
    if (port <= 0) throw std::runtime_error("the loopback server could not bind to 127.0.0.1");
    thread = std::thread([this] { server->listen_after_bind(); });
    for (int i = 0; i < 500 && !server->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }

  void stop() {
    stopping = true;
    server->stop();
    if (thread.joinable()) thread.join();
  }

  void answer(const httplib::Request& request, httplib::Response& response) {
    RecordedRequest recorded;
    recorded.method = request.method;
    recorded.target = request.target.empty() ? request.path : request.target;
    recorded.body = request.body;
    recorded.received_at = std::chrono::steady_clock::now();
    for (const auto& [name, value] : request.headers) {
      std::string lower = name;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      recorded.headers[lower] = value;
    }
    Reply reply;
    {
      std::unique_lock lock(mutex);
      requests.push_back(recorded);
      if (!queue.empty()) {
        reply = std::move(queue.front());
        queue.pop_front();
      } else if (handler) {
        const auto current = handler;
        lock.unlock();
        reply = current(recorded);
      } else {
        reply = Reply::json(R"({"error":{"message":"the test queued no reply for this request","type":"test_error"}})",
                            500);
      }
    }
    response.status = reply.status;
    for (const auto& [name, value] : reply.headers) response.set_header(name, value);
    if (!reply.chunked && reply.ending == Reply::Ending::complete) {
      response.set_content(reply.body, reply.content_type.c_str());
      return;
    }
    auto shared = std::make_shared<Reply>(std::move(reply));
    response.set_chunked_content_provider(
        shared->content_type.c_str(),
        [this, shared](std::size_t, httplib::DataSink& sink) { return stream(*shared, sink); });
  }

  bool stream(const Reply& reply, httplib::DataSink& sink) {
    const std::string_view body = reply.body;
    const std::size_t limit =
        reply.ending == Reply::Ending::complete ? body.size() : std::min(reply.cut_after, body.size());
    const std::size_t piece = reply.piece_size == 0 ? body.size() : reply.piece_size;
    for (std::size_t offset = 0; offset < limit && !stopping; offset += piece) {
      if (offset > 0 && reply.piece_delay.count() > 0) std::this_thread::sleep_for(reply.piece_delay);
      const std::size_t size = std::min(piece, limit - offset);
      if (!sink.write(body.data() + offset, size)) return false;
    }
    if (reply.ending == Reply::Ending::stall) {
      const auto until = std::chrono::steady_clock::now() + reply.stall_for;
      while (!stopping && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return false;
    }
    if (reply.ending == Reply::Ending::drop) return false;  // the connection closes mid-body
    sink.done();
    return true;
  }
};

LoopbackServer::LoopbackServer() : impl_(std::make_unique<Impl>()) {
  impl_->server = std::make_unique<httplib::Server>();
  impl_->start();
}

LoopbackServer::LoopbackServer([[maybe_unused]] const Tls& tls) : impl_(std::make_unique<Impl>()) {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  impl_->server = std::make_unique<httplib::SSLServer>(tls.certificate.c_str(), tls.private_key.c_str());
  if (!impl_->server->is_valid()) throw std::runtime_error("the TLS loopback server rejected its certificate or key");
  impl_->scheme = "https";
  impl_->start();
#else
  throw std::runtime_error("this cpp-httplib was built without OpenSSL");
#endif
}

LoopbackServer::~LoopbackServer() { impl_->stop(); }

std::string LoopbackServer::url() const { return impl_->scheme + "://127.0.0.1:" + std::to_string(impl_->port); }
int LoopbackServer::port() const { return impl_->port; }

void LoopbackServer::enqueue(Reply reply) {
  const std::lock_guard lock(impl_->mutex);
  impl_->queue.push_back(std::move(reply));
}

void LoopbackServer::set_handler(std::function<Reply(const RecordedRequest&)> handler) {
  const std::lock_guard lock(impl_->mutex);
  impl_->handler = std::move(handler);
}

std::vector<RecordedRequest> LoopbackServer::requests() const {
  const std::lock_guard lock(impl_->mutex);
  return impl_->requests;
}

bool LoopbackServer::tls_supported() {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  return true;
#else
  return false;
#endif
}

// --- RawServer ----------------------------------------------------------------------------------

struct RawServer::Impl {
  int listener = -1;
  int port = 0;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<std::size_t> connections{0};
  std::vector<Script> scripts;

  void serve() {
    while (!stopping) {
      const int client = ::accept(listener, nullptr, nullptr);
      if (client < 0) {
        if (stopping) return;
        continue;
      }
      const std::size_t index = connections++;
      // Read the request head and its body (Content-Length), as much as fits.
      std::string request;
      char buffer[65536];
      std::size_t wanted = std::string::npos;
      while (wanted == std::string::npos || request.size() < wanted) {
        const ssize_t got = ::recv(client, buffer, sizeof buffer, 0);
        if (got <= 0) break;
        request.append(buffer, static_cast<std::size_t>(got));
        const auto head_end = request.find("\r\n\r\n");
        if (wanted == std::string::npos && head_end != std::string::npos) {
          std::size_t length = 0;
          std::string head = request.substr(0, head_end);
          for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          if (const auto at = head.find("content-length:"); at != std::string::npos)
            length = std::stoul(head.substr(at + 15));
          wanted = head_end + 4 + length;
        }
      }
      const Script& script = scripts.at(std::min(index, scripts.size() - 1));
      std::size_t sent = 0;
      while (sent < script.bytes.size()) {
        const ssize_t wrote = ::send(client, script.bytes.data() + sent, script.bytes.size() - sent, MSG_NOSIGNAL);
        if (wrote <= 0) break;
        sent += static_cast<std::size_t>(wrote);
      }
      if (script.reset) {
        const linger abort_on_close{1, 0};
        ::setsockopt(client, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
      } else {
        ::shutdown(client, SHUT_WR);
      }
      ::close(client);
    }
  }
};

RawServer::RawServer(std::vector<Script> scripts) : impl_(std::make_unique<Impl>()) {
  if (scripts.empty()) throw std::invalid_argument("RawServer needs at least one script");
  impl_->scripts = std::move(scripts);
  impl_->listener = ::socket(AF_INET, SOCK_STREAM, 0);
  if (impl_->listener < 0) throw std::system_error(errno, std::generic_category(), "socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  if (::bind(impl_->listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(impl_->listener, 16) != 0)
    throw std::system_error(errno, std::generic_category(), "bind/listen on 127.0.0.1");
  socklen_t length = sizeof address;
  ::getsockname(impl_->listener, reinterpret_cast<sockaddr*>(&address), &length);
  impl_->port = ntohs(address.sin_port);
  impl_->thread = std::thread([impl = impl_.get()] { impl->serve(); });
}

RawServer::~RawServer() {
  impl_->stopping = true;
  ::shutdown(impl_->listener, SHUT_RDWR);  // wakes accept()
  impl_->thread.join();
  ::close(impl_->listener);
}

std::string RawServer::url() const { return "http://127.0.0.1:" + std::to_string(impl_->port); }
std::size_t RawServer::connections() const { return impl_->connections; }

}  // namespace cuda_agent::testing

// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// An incremental parser for server-sent events (the WHATWG `text/event-stream` format),
/// fed with whatever pieces the network delivers.

#include <cstddef>      // size_t
#include <stdexcept>    // length_error
#include <string>       // string, to_string
#include <string_view>  // string_view
#include <utility>      // move

namespace cuda_agent::detail {

/// One dispatched event.
struct SseEvent {
  /// The `event:` field; empty means the default type ("message").
  std::string event;
  /// The `data:` lines joined with '\n'.
  std::string data;
  std::string id;
};

/// Splits a byte stream into events.
///
/// Follows the WHATWG rules: lines end with CRLF, LF or CR (also when the CR and LF
/// arrive in different pieces); a leading byte-order mark is dropped; `:` starts a
/// comment; one space after the field's colon is removed; a blank line dispatches the
/// event, and an event without data is not dispatched. Unlike a browser, `finish()`
/// also dispatches an event whose closing blank line never came: servers that end a
/// stream with `data: [DONE]\n` alone still deliver their last event.
///
/// Memory is bounded: a line or an event longer than `max_event_bytes` throws
/// `std::length_error` instead of growing without limit.
class SseParser {
 public:
  explicit SseParser(std::size_t max_event_bytes = std::size_t{64} << 20) : max_event_bytes_(max_event_bytes) {}

  /// Parses `bytes`, calling `on_event(SseEvent&&)` for each complete event.
  template <class OnEvent>
  void feed(std::string_view bytes, OnEvent&& on_event) {
    for (std::size_t position = 0; position < bytes.size();) {
      if (at_stream_start_) {
        // The byte-order mark may itself be split across pieces.
        static constexpr std::string_view bom = "\xEF\xBB\xBF";
        while (position < bytes.size() && bom_matched_ < bom.size() && bytes[position] == bom[bom_matched_]) {
          ++bom_matched_;
          ++position;
        }
        if (bom_matched_ == bom.size()) {
          at_stream_start_ = false;
        } else if (position < bytes.size()) {
          line_.append(bom.substr(0, bom_matched_));  // not a BOM after all
          at_stream_start_ = false;
        }
        continue;
      }
      const char c = bytes[position];
      if (skip_line_feed_) {
        skip_line_feed_ = false;
        if (c == '\n') {
          ++position;
          continue;
        }
      }
      const std::size_t end = bytes.find_first_of("\r\n", position);
      if (end == std::string_view::npos) {
        append_to_line(bytes.substr(position));
        return;
      }
      append_to_line(bytes.substr(position, end - position));
      skip_line_feed_ = bytes[end] == '\r';
      position = end + 1;
      process_line(on_event);
    }
  }

  /// Ends the stream: a last line without its line break, and an event without its
  /// blank line, are delivered.
  template <class OnEvent>
  void finish(OnEvent&& on_event) {
    if (at_stream_start_) line_.append(std::string_view("\xEF\xBB\xBF").substr(0, bom_matched_));
    if (!line_.empty()) process_line(on_event);
    dispatch(on_event);
  }

 private:
  void append_to_line(std::string_view piece) {
    if (line_.size() + piece.size() + data_.size() > max_event_bytes_)
      throw std::length_error("server-sent event larger than " + std::to_string(max_event_bytes_) + " bytes");
    line_.append(piece);
  }

  template <class OnEvent>
  void process_line(OnEvent& on_event) {
    const std::string_view line = line_;
    if (line.empty()) {
      dispatch(on_event);
    } else if (line.front() != ':') {
      const std::size_t colon = line.find(':');
      const std::string_view field = line.substr(0, colon);
      std::string_view value = colon == std::string_view::npos ? std::string_view{} : line.substr(colon + 1);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (field == "data") {
        data_.append(value);
        data_.push_back('\n');
        has_data_ = true;
      } else if (field == "event") {
        event_.assign(value);
      } else if (field == "id") {
        if (value.find('\0') == std::string_view::npos) id_.assign(value);
      }
      // "retry" and unknown fields carry nothing a client of an LLM API needs.
    }
    line_.clear();
  }

  template <class OnEvent>
  void dispatch(OnEvent& on_event) {
    if (has_data_) {
      data_.pop_back();  // the '\n' after the last data line
      on_event(SseEvent{std::move(event_), std::move(data_), id_});
    }
    event_.clear();
    data_.clear();
    has_data_ = false;
  }

  std::size_t max_event_bytes_;
  std::string line_;
  std::string event_;
  std::string data_;
  std::string id_;  // persists across events, as the format specifies
  bool has_data_ = false;
  bool skip_line_feed_ = false;
  bool at_stream_start_ = true;
  std::size_t bom_matched_ = 0;
};

}  // namespace cuda_agent::detail

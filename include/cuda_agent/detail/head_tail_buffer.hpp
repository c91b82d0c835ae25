// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>    // min
#include <cstddef>      // size_t
#include <cstdint>      // uint64_t
#include <string>       // string, to_string
#include <string_view>  // string_view

namespace cuda_agent::detail {

/// Keeps the first and the last `limit / 2` bytes of a stream and counts the rest.
///
/// Compiler errors sit at the head of a log and summaries at its tail, so both ends are
/// worth more than the middle. Memory stays below `2 * limit` however much is appended.
class HeadTailBuffer {
 public:
  explicit HeadTailBuffer(std::size_t limit) : head_capacity_(limit - limit / 2), tail_capacity_(limit / 2) {}

  void append(std::string_view bytes) {
    total_ += bytes.size();
    const std::size_t to_head = std::min(bytes.size(), head_capacity_ - head_.size());
    head_.append(bytes.substr(0, to_head));
    bytes.remove_prefix(to_head);
    if (bytes.empty() || tail_capacity_ == 0) return;
    if (bytes.size() >= tail_capacity_) {
      tail_.assign(bytes.substr(bytes.size() - tail_capacity_));
      return;
    }
    tail_.append(bytes);
    // Trim lazily: erase only once the tail holds twice its capacity, which keeps
    // appends amortized O(1) while memory stays bounded.
    if (tail_.size() >= 2 * tail_capacity_) tail_.erase(0, tail_.size() - tail_capacity_);
  }

  [[nodiscard]] std::uint64_t total_bytes() const noexcept { return total_; }

  [[nodiscard]] std::uint64_t elided_bytes() const noexcept {
    return total_ - head_.size() - std::min(tail_.size(), tail_capacity_);
  }

  /// The kept bytes, with a marker line in place of what was dropped.
  [[nodiscard]] std::string text() const {
    const std::string_view tail =
        tail_.size() > tail_capacity_ ? std::string_view(tail_).substr(tail_.size() - tail_capacity_) : tail_;
    if (elided_bytes() == 0) return head_ + std::string(tail);
    std::string joined = head_;
    joined += "\n[... " + std::to_string(elided_bytes()) + " bytes elided ...]\n";
    joined += tail;
    return joined;
  }

 private:
  std::size_t head_capacity_;
  std::size_t tail_capacity_;
  std::string head_;
  std::string tail_;
  std::uint64_t total_ = 0;
};

}  // namespace cuda_agent::detail

// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `ServiceError`: a request the evaluation or episode service refuses, with the HTTP status
/// that says so and a stable code a client can act on.

#include <stdexcept>  // runtime_error
#include <string>     // string
#include <utility>    // move

#include <nlohmann/json.hpp>

namespace cuda_agent {

class ServiceError : public std::runtime_error {
 public:
  ServiceError(int status, std::string code, const std::string& message)
      : std::runtime_error(message), status_(status), code_(std::move(code)) {}

  [[nodiscard]] int status() const noexcept { return status_; }
  [[nodiscard]] const std::string& code() const noexcept { return code_; }
  /// {"error": {"code": ..., "message": ...}}: the body of every refusal.
  [[nodiscard]] nlohmann::json body() const { return {{"error", {{"code", code_}, {"message", what()}}}}; }

 private:
  int status_;
  std::string code_;
};

}  // namespace cuda_agent

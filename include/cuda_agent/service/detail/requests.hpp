// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// What the evaluation and the episode service check alike in a request: its JSON Schema
/// (shipped under resources/service/ and embedded), and the task it names.

#include <optional>     // optional
#include <stdexcept>    // logic_error
#include <string>       // string
#include <string_view>  // string_view
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/detail/json_schema.hpp"
#include "cuda_agent/resources.hpp"
#include "cuda_agent/service/service_error.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/tasks/task_loader.hpp"

namespace cuda_agent::detail {

/// The embedded schema `service/<file>`; a build without it is broken, not the request.
[[nodiscard]] inline nlohmann::json embedded_request_schema(std::string_view file) {
  const std::string path = "service/" + std::string(file);
  const std::optional<std::string_view> schema = embedded_resource(path);
  if (!schema) throw std::logic_error("the service's schema " + path + " is not embedded in this build");
  return nlohmann::json::parse(*schema);
}

/// Throws a 400 `schema_violation` naming every field of `request` (at `where` in the body,
/// empty for the whole body) that `schema` does not allow.
inline void require_schema(const nlohmann::json& schema, const nlohmann::json& request, const std::string& where) {
  if (!request.is_object())
    throw ServiceError(400, "invalid_request",
                       (where.empty() ? std::string("the request") : where) + " must be a JSON object");
  const std::vector<SchemaViolation> violations = schema_violations(schema, request);
  if (violations.empty()) return;
  std::string message = "the request does not fit its schema:";
  for (const SchemaViolation& violation : violations)
    message += "\n- " + (where.empty() ? violation.message : where + ": " + violation.message);
  throw ServiceError(400, "schema_violation", message);
}

/// The task a request's `task` field names: inline (name and source), or a file of the
/// server's host where `allow_host_paths`. `prefix` ("requests[3].", or empty) places the
/// field in refusals.
[[nodiscard]] inline Task task_of_request(const nlohmann::json& task, bool allow_host_paths,
                                          const std::string& prefix) {
  if (!task.contains("path")) {
    if (!task.contains("source") || !task.contains("name"))
      throw ServiceError(400, "invalid_request", prefix + "task: give its name and source");
    Task inline_task;
    inline_task.name = task["name"];
    inline_task.reference_source = task["source"];
    return inline_task;
  }
  if (!allow_host_paths)
    throw ServiceError(400, "host_paths_refused",
                       prefix +
                           "task.path: this server does not read files of its host; send the task's name and "
                           "source");
  if (task.contains("source"))
    throw ServiceError(400, "invalid_request", prefix + "task: give either a path or a source, not both");
  Task loaded;
  try {
    loaded = load_task(task["path"].get<std::string>());
  } catch (const std::exception& error) {
    throw ServiceError(400, "task_unreadable", prefix + "task.path: " + error.what());
  }
  if (task.contains("name")) loaded.name = task["name"];
  return loaded;
}

}  // namespace cuda_agent::detail

// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The `Tool` concept (name, description, JSON-Schema parameters, invocation), the
/// per-episode `ToolContext` that tools share, `AnyTool`, and the `ToolRegistry` through
/// which the agent loop offers tools to the model and dispatches its calls.

#include <chrono>       // file_clock
#include <concepts>     // same_as, convertible_to
#include <exception>    // exception
#include <filesystem>   // path, file_time_type
#include <map>          // map
#include <memory>       // unique_ptr, make_unique
#include <optional>     // optional
#include <stop_token>   // stop_token
#include <string>       // string
#include <string_view>  // string_view
#include <type_traits>  // remove_cvref_t, is_same_v
#include <utility>      // forward, move
#include <vector>       // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/message.hpp"
#include "cuda_agent/sandbox.hpp"

namespace cuda_agent {

/// What a tool gives back to the model.
struct ToolResult {
  /// The text the model reads.
  std::string content;
  /// The call failed (bad arguments, missing file, non-zero exit, timeout, ...).
  bool is_error = false;
  /// Structured facts for observers and trajectories; the model does not see them.
  nlohmann::json metadata = nlohmann::json::object();

  [[nodiscard]] static ToolResult success(std::string text, nlohmann::json metadata = nlohmann::json::object()) {
    return {std::move(text), false, std::move(metadata)};
  }
  [[nodiscard]] static ToolResult error(std::string text, nlohmann::json metadata = nlohmann::json::object()) {
    return {std::move(text), true, std::move(metadata)};
  }
};

/// State that lives for one episode and is shared by the tools of that episode.
class ToolContext {
 public:
  explicit ToolContext(std::filesystem::path workspace, std::vector<std::filesystem::path> protected_paths = {})
      : workspace_(std::move(workspace)),
        protected_paths_(std::move(protected_paths)),
        working_directory_(workspace_) {}

  /// The directory every path must resolve into.
  [[nodiscard]] const std::filesystem::path& workspace() const noexcept { return workspace_; }

  /// Paths (relative to the workspace) that tools must refuse to modify.
  [[nodiscard]] const std::vector<std::filesystem::path>& protected_paths() const noexcept { return protected_paths_; }

  /// The shell's working directory, which persists across Bash calls.
  [[nodiscard]] const std::filesystem::path& working_directory() const noexcept { return working_directory_; }
  void set_working_directory(std::filesystem::path directory) { working_directory_ = std::move(directory); }

  /// Files the model has read, with the modification time it saw. Write and Edit refuse
  /// to change a file that was never read, or that changed since it was read.
  void record_read(const std::filesystem::path& file, std::filesystem::file_time_type modified) {
    read_files_[file] = modified;
  }
  [[nodiscard]] const std::filesystem::file_time_type* read_time(const std::filesystem::path& file) const {
    const auto found = read_files_.find(file);
    return found == read_files_.end() ? nullptr : &found->second;
  }

  /// The sandbox the episode's untrusted commands run in, when the host (the agent loop)
  /// lends one; tools that run commands use it rather than a sandbox of their own.
  [[nodiscard]] const std::optional<SandboxRef>& sandbox() const noexcept { return sandbox_; }
  void set_sandbox(SandboxRef sandbox) { sandbox_ = sandbox; }

  /// Fires when the episode is cancelled; long-running tools should stop.
  [[nodiscard]] const std::stop_token& cancellation() const noexcept { return cancellation_; }
  void set_cancellation(std::stop_token token) { cancellation_ = std::move(token); }

 private:
  std::filesystem::path workspace_;
  std::vector<std::filesystem::path> protected_paths_;
  std::filesystem::path working_directory_;
  std::map<std::filesystem::path, std::filesystem::file_time_type> read_files_;
  std::stop_token cancellation_;
  std::optional<SandboxRef> sandbox_;
};

/// Something the model can call.
///
/// Required expressions, for `T& tool`, `const T& const_tool`, `const nlohmann::json& arguments`
/// and `ToolContext& context`:
///   - `const_tool.name()`: convertible to `std::string_view`; matches `^[a-zA-Z0-9_-]{1,64}$`
///     (the limit both OpenAI and Anthropic impose).
///   - `const_tool.description()`: convertible to `std::string_view`; written for a model.
///   - `const_tool.parameters()`: convertible to `nlohmann::json`; a JSON Schema (draft
///     2020-12) of an object, accepted as OpenAI `parameters` and Anthropic `input_schema`.
///   - `tool.invoke(arguments, context)`: returns a `ToolResult`. Problems the model can
///     fix (bad arguments, missing files, failing commands) are results with `is_error`
///     set, never exceptions; an exception means the tool itself is broken.
///
/// A minimal conforming type:
/// @code{.cpp}
/// struct ClockTool {
///   std::string_view name() const { return "clock"; }
///   std::string_view description() const { return "Returns the seconds since the epoch."; }
///   nlohmann::json parameters() const { return {{"type", "object"}, {"properties", nlohmann::json::object()}}; }
///   cuda_agent::ToolResult invoke(const nlohmann::json&, cuda_agent::ToolContext&) {
///     return cuda_agent::ToolResult::success(std::to_string(std::time(nullptr)));
///   }
/// };
/// static_assert(cuda_agent::Tool<ClockTool>);
/// @endcode
template <class T>
concept Tool = requires(T& tool, const T& const_tool, const nlohmann::json& arguments, ToolContext& context) {
  { const_tool.name() } -> std::convertible_to<std::string_view>;
  { const_tool.description() } -> std::convertible_to<std::string_view>;
  { const_tool.parameters() } -> std::convertible_to<nlohmann::json>;
  { tool.invoke(arguments, context) } -> std::same_as<ToolResult>;
};

/// Holds any `Tool` by value (move-only) behind one type.
class AnyTool {
 public:
  template <class T>
  requires(Tool<std::remove_cvref_t<T>> && !std::is_same_v<std::remove_cvref_t<T>, AnyTool>)
      AnyTool(T&& tool)  // NOLINT(google-explicit-constructor): a wrapper, converting on purpose
      : self_(std::make_unique<Model<std::remove_cvref_t<T>>>(std::forward<T>(tool))) {}

  AnyTool(AnyTool&&) noexcept = default;
  AnyTool& operator=(AnyTool&&) noexcept = default;

  [[nodiscard]] std::string_view name() const { return self_->name(); }
  [[nodiscard]] std::string_view description() const { return self_->description(); }
  [[nodiscard]] nlohmann::json parameters() const { return self_->parameters(); }
  [[nodiscard]] ToolResult invoke(const nlohmann::json& arguments, ToolContext& context) {
    return self_->invoke(arguments, context);
  }
  [[nodiscard]] ToolSpec spec() const { return {std::string(name()), std::string(description()), parameters()}; }

 private:
  struct Interface {
    virtual ~Interface() = default;
    [[nodiscard]] virtual std::string_view name() const = 0;
    [[nodiscard]] virtual std::string_view description() const = 0;
    [[nodiscard]] virtual nlohmann::json parameters() const = 0;
    virtual ToolResult invoke(const nlohmann::json& arguments, ToolContext& context) = 0;
  };
  template <class T>
  struct Model final : Interface {
    explicit Model(T value) : tool(std::move(value)) {}
    [[nodiscard]] std::string_view name() const override { return tool.name(); }
    [[nodiscard]] std::string_view description() const override { return tool.description(); }
    [[nodiscard]] nlohmann::json parameters() const override { return tool.parameters(); }
    ToolResult invoke(const nlohmann::json& arguments, ToolContext& context) override {
      return tool.invoke(arguments, context);
    }
    T tool;
  };
  std::unique_ptr<Interface> self_;
};

static_assert(Tool<AnyTool>);

/// The tools offered to the model, by name. Dispatch never throws for anything the model
/// did: unknown tools, malformed arguments and tool exceptions come back as tool errors.
class ToolRegistry {
 public:
  /// Adds a tool; a tool of the same name is replaced.
  template <Tool T>
  ToolRegistry& add(T&& tool) {
    AnyTool erased(std::forward<T>(tool));
    std::string key(erased.name());
    for (auto& entry : tools_) {
      if (entry.name() == key) {
        entry = std::move(erased);
        return *this;
      }
    }
    tools_.push_back(std::move(erased));
    return *this;
  }

  [[nodiscard]] bool contains(std::string_view name) const noexcept { return find(name) != nullptr; }
  [[nodiscard]] std::size_t size() const noexcept { return tools_.size(); }

  /// Specifications for the model, in the order the tools were added.
  [[nodiscard]] std::vector<ToolSpec> specs() const {
    std::vector<ToolSpec> result;
    result.reserve(tools_.size());
    for (const AnyTool& tool : tools_) result.push_back(tool.spec());
    return result;
  }

  /// Runs the call the model asked for.
  [[nodiscard]] ToolResult invoke(const ToolCall& call, ToolContext& context) {
    AnyTool* tool = find(call.name);
    if (tool == nullptr) {
      std::string known;
      for (const AnyTool& each : tools_) known += (known.empty() ? "" : ", ") + std::string(each.name());
      return ToolResult::error("Error: no tool named '" + call.name + "'. Available tools: " + known + ".");
    }
    if (call.argument_error)
      return ToolResult::error("Error: the arguments for " + call.name + " could not be used: " + *call.argument_error +
                               ". Send the arguments as one JSON object.");
    try {
      return tool->invoke(call.arguments, context);
    } catch (const std::exception& error) {
      return ToolResult::error("Error: " + call.name + " failed: " + error.what(), {{"exception", true}});
    }
  }

 private:
  [[nodiscard]] AnyTool* find(std::string_view name) noexcept {
    for (AnyTool& tool : tools_)
      if (tool.name() == name) return &tool;
    return nullptr;
  }
  [[nodiscard]] const AnyTool* find(std::string_view name) const noexcept {
    for (const AnyTool& tool : tools_)
      if (tool.name() == name) return &tool;
    return nullptr;
  }

  std::vector<AnyTool> tools_;
};

}  // namespace cuda_agent

// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Multi-turn episodes for agents and RL trainers that drive the model themselves: the
/// service keeps each episode's workspace and sandbox, runs the tool calls the client's
/// model makes, and ends the episode with a trusted evaluation through the
/// `EvaluationService` (so the reward is the one `POST /v1/evaluations` gives, from the
/// same pool, cache and journal). `cuda-agent serve` puts it behind `/v1/episodes` and the
/// NeMo-Gym routes (`server/http_service.hpp`).
///
/// ```
/// <state_directory>/<id>/episode.json   the task, the client, the evaluation once finished
/// <state_directory>/<id>/workspace/     SKILL.md, model.py, model_new.py, kernels/
/// <state_directory>/<id>/work/          what the host's tools keep outside the workspace
/// ```
///
/// - `open` checks the request against `resources/service/episode_request.schema.json`,
///   materializes the workspace and asks the host's `EpisodeToolboxFactory` for the
///   episode's sandbox and tools; it answers with SKILL.md, the workspace's files and the
///   tool specifications to hand to a model.
/// - `call_tool` runs one call in the episode's sandbox; calls of one episode run one at a
///   time, calls of different episodes at once. What the model got wrong (bad arguments, a
///   failing command) is a tool result with `is_error`, never a refusal.
/// - `finish` submits the workspace's candidate for trusted evaluation, once: a repeated
///   finish answers with the same evaluation. Tool calls are refused after it.
/// - An episode idle for `idle_expiry` is closed and its directory removed. A service
///   started on the same state directory reopens the episodes it finds there (the files
///   the model read are forgotten: it reads a file again before editing it).
/// - An episode belongs to the client that opened it; to every other it does not exist.

#include <algorithm>           // sort
#include <chrono>              // steady_clock, system_clock, milliseconds
#include <condition_variable>  // condition_variable
#include <cstddef>             // size_t
#include <filesystem>          // path, directory_iterator, remove_all
#include <functional>          // function
#include <map>                 // map
#include <memory>              // shared_ptr, unique_ptr, make_shared
#include <mutex>               // mutex, lock_guard, unique_lock
#include <optional>            // optional
#include <stdexcept>           // invalid_argument
#include <string>              // string
#include <thread>              // thread
#include <utility>             // move
#include <vector>              // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/detail/harness_session.hpp"
#include "cuda_agent/evaluation_policy.hpp"
#include "cuda_agent/message.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/service/detail/requests.hpp"
#include "cuda_agent/service/evaluation_service.hpp"
#include "cuda_agent/service/service_error.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/tasks/workspace.hpp"
#include "cuda_agent/tool.hpp"
#include "cuda_agent/verify/harness_worker.hpp"

namespace cuda_agent {

/// What the host's factory is told about an episode it equips.
struct EpisodeSetup {
  std::string id;
  const Task& task;
  const Workspace& workspace;
  /// The episode's own directory outside the workspace (builds, the harness scripts).
  std::filesystem::path work_directory;
  /// The episode's evaluation policy (the request's choices over the evaluation service's
  /// own), by which its trusted evaluation will judge: tools that check the candidate
  /// should judge by it too.
  const EvaluationPolicy& policy;
};

/// An episode's sandbox and tools. The tools may refer to the sandbox, which lives exactly
/// as long as they do (it is held by pointer, so the toolbox can move), and to whatever
/// `resources` keeps alive (parts the host shares between episodes).
struct EpisodeToolbox {
  // In this order, so that the tools go first and what they refer to after them.
  std::shared_ptr<const void> resources;
  std::unique_ptr<AnySandbox> sandbox;
  ToolRegistry tools;
};

using EpisodeToolboxFactory = std::function<EpisodeToolbox(const EpisodeSetup&)>;

struct EpisodeServiceOptions {
  /// One directory per episode (see the file comment). Required.
  std::filesystem::path state_directory;
  /// The workspace's device ("cuda" or "cpu"), library policy and SKILL.md.
  WorkspaceOptions workspace;
  /// An episode without a request for this long is closed and its files removed.
  std::chrono::milliseconds idle_expiry{std::chrono::minutes(30)};
  /// Open episodes, at most (429 beyond).
  std::size_t max_episodes = 256;
  /// Whether a request may name a task file on the server's host.
  bool allow_host_paths = false;
  /// Bytes of one file of the workspace returned by `open`, at most (larger ones are listed
  /// without their content; the model reads them with its tools).
  std::size_t max_returned_file_bytes = 256U << 10U;
};

class EpisodeService {
 public:
  /// Episodes are finished through `evaluations`, which must outlive this service.
  /// Reopens the episodes found in `options.state_directory`.
  EpisodeService(EpisodeServiceOptions options, EvaluationService& evaluations, EpisodeToolboxFactory toolbox)
      : options_(std::move(options)), evaluations_(evaluations), make_toolbox_(std::move(toolbox)) {
    if (options_.state_directory.empty())
      throw std::invalid_argument("EpisodeService needs a state directory (the episodes' workspaces live there)");
    if (!make_toolbox_) throw std::invalid_argument("EpisodeService needs a factory of the episodes' tools");
    if (options_.idle_expiry <= std::chrono::milliseconds::zero())
      throw std::invalid_argument("EpisodeService: the idle expiry must be positive");
    request_schema_ = detail::embedded_request_schema("episode_request.schema.json");
    options_.state_directory = std::filesystem::absolute(options_.state_directory).lexically_normal();
    detail::make_open_directory(options_.state_directory);
    reopen();
    reaper_ = std::thread([this] { expire_idle_episodes(); });
  }

  EpisodeService(const EpisodeService&) = delete;
  EpisodeService& operator=(const EpisodeService&) = delete;

  /// Closes nothing: the episodes stay on disk for the next service on this directory.
  ~EpisodeService() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    reaper_wakeup_.notify_all();
    reaper_.join();
  }

  /// Opens an episode for `client`: its id, SKILL.md, the workspace's files and the tools.
  nlohmann::json open(const nlohmann::json& request, const std::string& client = "local") {
    detail::require_schema(request_schema_, request, "");
    Task task = detail::task_of_request(request["task"], options_.allow_host_paths, "");
    const nlohmann::json& requested_policy = request.value("policy", nlohmann::json::object());
    nlohmann::json policy = evaluations_.effective_policy(requested_policy);
    {
      const std::lock_guard lock(mutex_);
      if (stopping_ || evaluations_.draining())
        throw ServiceError(503, "draining", "the service is shutting down and opens no episodes");
      if (episodes_.size() + opening_ >= options_.max_episodes)
        throw ServiceError(429, "too_many_episodes",
                           "the service holds " + std::to_string(episodes_.size()) +
                               " open episodes, its limit: finish or close some first");
      ++opening_;
    }
    struct OpeningDone {
      EpisodeService& service;
      ~OpeningDone() {
        const std::lock_guard lock(service.mutex_);
        --service.opening_;
      }
    } opening_done{*this};

    auto episode = std::make_shared<Episode>();
    episode->id = "ep-" + detail::random_hex(8);
    episode->client = client;
    episode->task = std::move(task);
    episode->metadata = request.value("metadata", nlohmann::json::object());
    episode->set_policy(std::move(policy));
    episode->created_at = std::chrono::system_clock::now();
    const std::filesystem::path directory = directory_of(episode->id);
    try {
      detail::make_open_directory(directory);
      WorkspaceOptions workspace = options_.workspace;
      // SKILL.md states the libraries the episode's evaluation allows.
      if (requested_policy.contains("libraries") && episode->evaluation_policy.libraries)
        workspace.libraries = *episode->evaluation_policy.libraries;
      episode->workspace = materialize_workspace(episode->task, directory / "workspace", workspace);
      equip(*episode);
      save(*episode);
    } catch (const ServiceError&) {
      remove_directory(directory);
      throw;
    } catch (const std::exception& error) {
      remove_directory(directory);
      throw ServiceError(500, "episode_setup_failed",
                         std::string("the service could not set up the episode: ") + error.what());
    }
    nlohmann::json answer = describe(*episode);
    const std::lock_guard lock(mutex_);
    episodes_[episode->id] = episode;
    return answer;
  }

  /// Runs tool `name` with `arguments` in episode `id`: {"content", "is_error", "metadata"}.
  nlohmann::json call_tool(const std::string& id, const std::string& name, const nlohmann::json& arguments,
                           const std::string& client = "local") {
    if (!arguments.is_object())
      throw ServiceError(400, "invalid_arguments", "the body of a tool call is its arguments, one JSON object");
    const std::shared_ptr<Episode> episode = find(id, client);
    const std::lock_guard call(episode->mutex);
    if (episode->closed) throw not_found(id);
    if (!episode->evaluation_id.empty())
      throw ServiceError(409, "episode_finished",
                         "episode " + id + " has finished (evaluation " + episode->evaluation_id +
                             "): its workspace takes no more tool calls");
    if (!episode->toolbox.tools.contains(name)) {
      std::string known;
      for (const ToolSpec& spec : episode->toolbox.tools.specs()) known += (known.empty() ? "" : ", ") + spec.name;
      throw ServiceError(404, "unknown_tool", "episode " + id + " has no tool '" + name + "'; it has " + known);
    }
    ToolCall tool_call;
    {
      const std::lock_guard lock(mutex_);
      episode->last_used = std::chrono::steady_clock::now();
      tool_call.id = "call-" + std::to_string(++episode->tool_calls);
    }
    tool_call.name = name;
    tool_call.arguments = arguments;
    const ToolResult result = episode->toolbox.tools.invoke(tool_call, *episode->context);
    touch(*episode);
    return {{"content", result.content}, {"is_error", result.is_error}, {"metadata", result.metadata}};
  }

  /// Submits episode `id`'s candidate for trusted evaluation (once) and answers with the
  /// evaluation's status after waiting up to `wait` for it: {"episode", "evaluation"}.
  nlohmann::json finish(const std::string& id, std::chrono::milliseconds wait, const std::string& client = "local") {
    const std::shared_ptr<Episode> episode = find(id, client);
    std::string evaluation_id;
    {
      const std::lock_guard call(episode->mutex);
      if (episode->closed) throw not_found(id);
      touch(*episode);
      if (episode->evaluation_id.empty()) {
        nlohmann::json metadata = episode->metadata;
        metadata["episode"] = episode->id;
        const nlohmann::json submission = {
            {"task", {{"name", episode->task.name}, {"source", episode->task.reference_source}}},
            {"candidate", {{"files", read_candidate_sources(episode->workspace.root).files}}},
            {"policy", episode->policy},
            {"metadata", std::move(metadata)}};
        const nlohmann::json accepted = evaluations_.submit(submission, episode->client);
        {
          const std::lock_guard lock(mutex_);
          episode->evaluation_id = accepted["evaluations"][0]["id"];
        }
        save(*episode);
      }
      evaluation_id = episode->evaluation_id;
    }
    return {{"episode", id}, {"evaluation", evaluations_.wait(evaluation_id, wait)}};
  }

  /// What episode `id` is: its task, tool calls so far, idle time, and its evaluation.
  [[nodiscard]] nlohmann::json status(const std::string& id, const std::string& client = "local") const {
    const std::shared_ptr<Episode> episode = find(id, client);
    const std::lock_guard lock(mutex_);
    return summary(*episode);
  }

  /// Closes episode `id` and removes its files (its evaluation, if any, goes on).
  void close(const std::string& id, const std::string& client = "local") {
    const std::shared_ptr<Episode> episode = find(id, client);
    {
      const std::lock_guard lock(mutex_);
      episodes_.erase(id);
    }
    // After the running tool call, if any: its sandbox must not lose its directory under it.
    const std::lock_guard call(episode->mutex);
    discard(*episode);
  }

  /// Open episodes now.
  [[nodiscard]] std::size_t size() const {
    const std::lock_guard lock(mutex_);
    return episodes_.size();
  }

  [[nodiscard]] const EpisodeServiceOptions& options() const noexcept { return options_; }

 private:
  struct Episode {
    std::string id;
    std::string client;
    Task task;
    Workspace workspace;
    nlohmann::json metadata;
    /// What its trusted evaluation uses (`EvaluationService::effective_policy`), and the
    /// same as its tools take it.
    nlohmann::json policy;
    EvaluationPolicy evaluation_policy;
    std::chrono::system_clock::time_point created_at;
    EpisodeToolbox toolbox;
    std::optional<ToolContext> context;
    /// Held while a tool call, a finish or a close works on the episode.
    std::mutex mutex;
    bool closed = false;
    // Written under both mutexes, read under either (status and the reaper take only the
    // service's, so that they never wait for a running tool call).
    std::size_t tool_calls = 0;
    std::string evaluation_id;
    std::chrono::steady_clock::time_point last_used = std::chrono::steady_clock::now();

    void set_policy(nlohmann::json effective) {
      evaluation_policy = effective.get<EvaluationPolicy>();
      policy = std::move(effective);
    }
  };

  [[nodiscard]] std::filesystem::path directory_of(const std::string& id) const {
    return options_.state_directory / id;
  }

  static ServiceError not_found(const std::string& id) {
    return ServiceError(404, "not_found", "no episode has the id '" + id + "' (closed, expired or never opened)");
  }

  [[nodiscard]] std::shared_ptr<Episode> find(const std::string& id, const std::string& client) const {
    const std::lock_guard lock(mutex_);
    const auto found = episodes_.find(id);
    // Another client's episode is answered as no episode: its existence is not theirs to learn.
    if (found == episodes_.end() || found->second->client != client) throw not_found(id);
    return found->second;
  }

  void touch(Episode& episode) {
    const std::lock_guard lock(mutex_);
    episode.last_used = std::chrono::steady_clock::now();
  }

  /// The host's sandbox and tools for `episode`, and its tool context.
  void equip(Episode& episode) {
    const std::filesystem::path work = directory_of(episode.id) / "work";
    detail::make_open_directory(work);
    episode.toolbox =
        make_toolbox_(EpisodeSetup{episode.id, episode.task, episode.workspace, work, episode.evaluation_policy});
    episode.context.emplace(episode.workspace.tool_context());
    if (episode.toolbox.sandbox) episode.context->set_sandbox(SandboxRef(*episode.toolbox.sandbox));
  }

  /// episode.json, replaced whole: what a restarted service needs to reopen the episode.
  void save(const Episode& episode) const {
    nlohmann::json protected_paths = nlohmann::json::array();
    for (const std::filesystem::path& path : episode.workspace.protected_paths)
      protected_paths.push_back(path.generic_string());
    const nlohmann::json record = {
        {"id", episode.id},
        {"client", episode.client},
        {"task", {{"name", episode.task.name}, {"source", episode.task.reference_source}}},
        {"metadata", episode.metadata},
        {"policy", episode.policy},
        {"created_at", std::chrono::duration<double>(episode.created_at.time_since_epoch()).count()},
        {"protected_paths", protected_paths},
        {"evaluation_id", episode.evaluation_id}};
    detail::write_file_atomically(directory_of(episode.id) / "episode.json", record.dump(1) + "\n");
  }

  /// What `open` answers: everything a client needs to prompt its model.
  [[nodiscard]] nlohmann::json describe(const Episode& episode) const {
    nlohmann::json files = nlohmann::json::object();
    nlohmann::json omitted = nlohmann::json::array();
    const std::filesystem::path& root = episode.workspace.root;
    std::map<std::string, std::string> contents = read_candidate_sources(root).files;
    for (const std::filesystem::path& path : episode.workspace.protected_paths)
      if (path != "SKILL.md") contents[path.generic_string()] = detail::read_file(root / path);
    for (auto& [path, content] : contents) {
      if (content.size() > options_.max_returned_file_bytes) {
        omitted.push_back(path);
        continue;
      }
      files[path] = std::move(content);
    }
    nlohmann::json tools = nlohmann::json::array();
    for (const ToolSpec& spec : episode.toolbox.tools.specs())
      tools.push_back({{"name", spec.name}, {"description", spec.description}, {"parameters", spec.parameters}});
    nlohmann::json answer = summary(episode);
    answer["skill"] = detail::read_file(root / "SKILL.md");
    answer["files"] = std::move(files);
    if (!omitted.empty()) answer["files_omitted"] = std::move(omitted);
    answer["tools"] = std::move(tools);
    return answer;
  }

  [[nodiscard]] nlohmann::json summary(const Episode& episode) const {
    const auto idle = std::chrono::steady_clock::now() - episode.last_used;
    return {{"id", episode.id},
            {"task", episode.task.name},
            {"client", episode.client},
            {"device", episode.workspace.device},
            {"policy", episode.policy},
            {"metadata", episode.metadata},
            {"tool_calls", episode.tool_calls},
            {"finished", !episode.evaluation_id.empty()},
            {"evaluation_id", episode.evaluation_id.empty() ? nlohmann::json() : nlohmann::json(episode.evaluation_id)},
            {"idle_s", std::chrono::duration<double>(idle).count()},
            {"idle_expiry_s", std::chrono::duration<double>(options_.idle_expiry).count()}};
  }

  static void remove_directory(const std::filesystem::path& directory) {
    std::error_code ignored;
    std::filesystem::remove_all(directory, ignored);
  }

  /// Under the episode's mutex: its tools and sandbox gone, then its files.
  void discard(Episode& episode) {
    episode.closed = true;
    episode.context.reset();
    episode.toolbox = EpisodeToolbox{};
    remove_directory(directory_of(episode.id));
  }

  /// The episodes a previous service left in the state directory, open again; one that
  /// cannot be reopened is removed (its client gets 404 and opens another).
  void reopen() {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(options_.state_directory, error)) {
      const std::filesystem::path& directory = entry.path();
      if (!entry.is_directory() || directory.filename().string().rfind("ep-", 0) != 0) continue;
      auto episode = std::make_shared<Episode>();
      try {
        const nlohmann::json record = nlohmann::json::parse(detail::read_file(directory / "episode.json"));
        episode->id = record.at("id");
        if (episode->id != directory.filename().string()) throw std::runtime_error("episode.json names another id");
        episode->client = record.at("client");
        episode->task.name = record.at("task").at("name");
        episode->task.reference_source = record.at("task").at("source");
        episode->metadata = record.value("metadata", nlohmann::json::object());
        episode->set_policy(record.contains("policy") ? record["policy"]
                                                      : evaluations_.effective_policy(nlohmann::json::object()));
        episode->created_at =
            std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
                std::chrono::duration<double>(record.value("created_at", 0.0))));
        episode->evaluation_id = record.value("evaluation_id", "");
        episode->workspace.root = directory / "workspace";
        episode->workspace.device = options_.workspace.device;
        episode->workspace.libraries = options_.workspace.libraries;
        for (const std::string& path : record.at("protected_paths").get<std::vector<std::string>>())
          episode->workspace.protected_paths.emplace_back(path);
        episode->workspace.writable_paths = {std::filesystem::path(candidate_kernels_directory),
                                             std::filesystem::path(candidate_model_file)};
        if (!std::filesystem::is_directory(episode->workspace.root)) throw std::runtime_error("no workspace");
        equip(*episode);
      } catch (const std::exception&) {
        remove_directory(directory);
        continue;
      }
      episodes_[episode->id] = std::move(episode);
    }
  }

  /// The reaper: closes what has been idle for `idle_expiry`, checking as often as a
  /// quarter of it (at most every 30 s).
  void expire_idle_episodes() {
    const auto period = std::min<std::chrono::milliseconds>(options_.idle_expiry / 4, std::chrono::seconds(30));
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      reaper_wakeup_.wait_for(lock, std::max(period, std::chrono::milliseconds(1)), [this] { return stopping_; });
      if (stopping_) break;
      const auto now = std::chrono::steady_clock::now();
      std::vector<std::shared_ptr<Episode>> expired;
      for (auto it = episodes_.begin(); it != episodes_.end();) {
        const std::shared_ptr<Episode>& episode = it->second;
        // One in the middle of a call is not idle, whatever its clock says.
        std::unique_lock busy(episode->mutex, std::try_to_lock);
        if (busy.owns_lock() && now - episode->last_used >= options_.idle_expiry) {
          expired.push_back(episode);
          it = episodes_.erase(it);
        } else {
          ++it;
        }
      }
      lock.unlock();
      for (const std::shared_ptr<Episode>& episode : expired) {
        const std::lock_guard call(episode->mutex);
        discard(*episode);
      }
      lock.lock();
    }
  }

  EpisodeServiceOptions options_;
  EvaluationService& evaluations_;
  EpisodeToolboxFactory make_toolbox_;
  nlohmann::json request_schema_;

  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Episode>> episodes_;
  std::size_t opening_ = 0;
  bool stopping_ = false;
  std::condition_variable reaper_wakeup_;
  std::thread reaper_;
};

}  // namespace cuda_agent

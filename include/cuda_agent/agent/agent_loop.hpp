// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `AgentLoop`: the ReAct loop that composes a model backend, tools, a sandbox, the
/// trusted evaluator and a reward policy into episodes.
///
/// One episode, as data flows:
///   1. The system prompt is the workspace's SKILL.md; the first user message is the task.
///   2. Each turn the model answers; every tool call it makes is run in order (file tools
///      in the workspace, commands in the sandbox) and answered, errors included.
///   3. Whenever the candidate files changed and the model has verified them (a
///      successful Verify call, or a Bash command that ran the verification), and once
///      more at the end, a snapshot of the candidate files is scored by the trusted
///      evaluator. The best result (reward, then speedup) is kept and written out: the
///      episode's answer is the best candidate, not the last.
///   4. The episode ends when the model stops calling tools or calls Finish, or when a
///      budget (turns, wall time, money, tokens, context) runs out, or on cancellation.
///   5. Every event is appended to a JSONL trajectory and flushed; `resume` continues a
///      killed run from it without repeating tool calls that had finished.
///
/// Each component is a template parameter satisfying its concept, so hosts replace any of
/// them; the type-erased `Any*` wrappers work too.
///
/// This header holds the loop. Its limits and prices are in budget.hpp, the text the
/// model reads from the loop in prompts.hpp, and what resuming needs besides replaying
/// the trajectory in resume.hpp.

#include <algorithm>   // any_of, find_if
#include <chrono>      // steady_clock, duration
#include <concepts>    // convertible_to, same_as
#include <cstddef>     // size_t
#include <cstdint>     // int64_t
#include <exception>   // exception
#include <filesystem>  // path, create_directories, exists, copy
#include <fstream>     // ofstream
#include <functional>  // function
#include <memory>      // unique_ptr, make_unique
#include <optional>    // optional
#include <set>         // set
#include <stdexcept>   // invalid_argument, runtime_error
#include <stop_token>  // stop_token
#include <string>      // string
#include <utility>     // move
#include <vector>      // vector

#include <nlohmann/json.hpp>

#include "cuda_agent/agent/agent_observer.hpp"
#include "cuda_agent/agent/agent_report.hpp"
#include "cuda_agent/agent/agent_result.hpp"
#include "cuda_agent/agent/budget.hpp"
#include "cuda_agent/agent/context_window.hpp"
#include "cuda_agent/agent/detail/candidate_files.hpp"
#include "cuda_agent/agent/detail/stuck_detector.hpp"
#include "cuda_agent/agent/prompts.hpp"
#include "cuda_agent/agent/resume.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/evaluator.hpp"
#include "cuda_agent/llm_client.hpp"
#include "cuda_agent/message.hpp"
#include "cuda_agent/reward_policy.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/tool.hpp"
#include "cuda_agent/trajectory.hpp"

namespace cuda_agent {

/// The tools a loop offers: `ToolRegistry`, or any type with the same two members.
///
/// Required expressions, for `T& tools`, `const T& const_tools`, `const ToolCall& call` and
/// `ToolContext& context`:
///   - `const_tools.specs()`: convertible to `std::vector<ToolSpec>`, the tools as the
///     model sees them.
///   - `tools.invoke(call, context)`: returns a `ToolResult`; unknown tools and malformed
///     arguments are answered as tool errors. An exception is reported to the model as a
///     tool error too; it never ends the episode.
template <class T>
concept ToolSet = requires(T& tools, const T& const_tools, const ToolCall& call, ToolContext& context) {
  { const_tools.specs() } -> std::convertible_to<std::vector<ToolSpec>>;
  { tools.invoke(call, context) } -> std::same_as<ToolResult>;
};

static_assert(ToolSet<ToolRegistry>);

/// Whether a finished tool call verified the candidate (the trigger for a trusted
/// evaluation when the candidate changed).
using VerificationPredicate = std::function<bool(const ToolCall&, const ToolResult&)>;

/// The default test: a successful call of the Verify tool, a result whose metadata says
/// `"verified": true`, or a successful Bash command containing one of `commands`.
[[nodiscard]] inline VerificationPredicate verification_by_tool_or_command(std::vector<std::string> commands) {
  return [commands = std::move(commands)](const ToolCall& call, const ToolResult& result) {
    if (result.is_error) return false;
    if (result.metadata.is_object()) {
      if (result.metadata.value("verified", false)) return true;
      if (const auto verification = result.metadata.find("verification");
          verification != result.metadata.end() && verification->is_object())
        return verification->value("correct", false);
    }
    if (call.name == "Verify") return true;
    if (call.name != "Bash") return false;
    const std::string command = call.arguments.value("command", "");
    return std::any_of(commands.begin(), commands.end(),
                       [&](const std::string& pattern) { return command.find(pattern) != std::string::npos; });
  };
}

struct AgentOptions {
  /// Where the trajectory (`trajectory.jsonl`), the snapshots of scored candidates
  /// (`snapshots/`), the best candidate (`best/`) and the reports go. Required.
  std::filesystem::path output_directory;
  AgentBudget budget;
  ContextOptions context;

  /// Passed to the model with every request.
  std::optional<int> max_output_tokens;
  std::optional<double> temperature;
  std::optional<std::int64_t> seed;
  std::optional<bool> parallel_tool_calls;
  nlohmann::json extra_body = nlohmann::json::object();

  /// The system prompt. Unset: the workspace's SKILL.md.
  std::function<std::string(const Task&, const std::filesystem::path& workspace)> system_prompt;
  /// The first user message. Unset: `default_task_prompt`.
  std::function<std::string(const Task&, const std::filesystem::path& workspace)> task_prompt;

  /// Offer a `Finish` tool through which the model declares completion.
  bool offer_finish_tool = true;
  /// Score the candidate whenever it changed and the model verified it (else only at the end).
  bool evaluate_when_verified = true;
  /// Tell the model each trusted result (and the best so far) in a short note.
  bool report_evaluations_to_model = true;
  /// Unset: `verification_by_tool_or_command({"verify"})`.
  VerificationPredicate is_verification;
  /// The same failing call this many times in a row ends the episode (0: never). The
  /// model is warned one failure before.
  std::size_t stuck_repeat_limit = 4;
  /// Workspace paths the tools must not modify.
  std::vector<std::filesystem::path> protected_paths = {"SKILL.md", "model.py"};
  /// Write report.md and report.json into the output directory at the end.
  bool write_reports = true;
};

/// The ReAct loop. `run` starts an episode, `resume` continues one from its trajectory.
/// One object runs one episode at a time; observers are called on the thread that runs it.
template <LlmClient Client, ToolSet Tools, Sandbox SandboxType, Evaluator EvaluatorType, RewardPolicy Policy>
class AgentLoop {
 public:
  AgentLoop(Client client, Tools tools, SandboxType sandbox, EvaluatorType evaluator, Policy policy,
            AgentOptions options = {})
      : client_(std::move(client)),
        tools_(std::move(tools)),
        sandbox_(std::move(sandbox)),
        evaluator_(std::move(evaluator)),
        policy_(std::move(policy)),
        options_(std::move(options)) {
    if (!options_.is_verification) options_.is_verification = verification_by_tool_or_command({"verify"});
  }

  /// Observers are not owned: each must outlive the episodes it watches.
  void add_observer(AgentObserver& observer) { observers_.push_back(&observer); }

  [[nodiscard]] Client& client() noexcept { return client_; }
  [[nodiscard]] Tools& tools() noexcept { return tools_; }
  [[nodiscard]] SandboxType& sandbox() noexcept { return sandbox_; }
  [[nodiscard]] EvaluatorType& evaluator() noexcept { return evaluator_; }
  [[nodiscard]] const Policy& policy() const noexcept { return policy_; }
  [[nodiscard]] AgentOptions& options() noexcept { return options_; }

  /// The trajectory an episode writes under `options().output_directory`.
  [[nodiscard]] std::filesystem::path trajectory_path() const { return options_.output_directory / "trajectory.jsonl"; }

  /// Runs a new episode on `task` in `workspace` (already materialized: SKILL.md,
  /// model.py, kernels/). Throws `std::invalid_argument` if the output directory already
  /// holds a trajectory: continue it with `resume`, or choose another directory.
  EpisodeResult run(const Task& task, const std::filesystem::path& workspace, std::stop_token cancellation = {}) {
    Episode episode = open_episode(task, workspace, std::move(cancellation), false);
    const std::string system =
        options_.system_prompt ? options_.system_prompt(task, workspace) : detail::read_skill(workspace);
    const std::string prompt =
        options_.task_prompt ? options_.task_prompt(task, workspace) : default_task_prompt(task, workspace);
    record_message(episode, Message::system(system), ContextRole::pinned);
    record_message(episode, Message::user(prompt), ContextRole::pinned);
    drive(episode);
    return finish(episode);
  }

  /// Continues the episode recorded in the output directory's trajectory, in the same
  /// workspace: the conversation, compactions, evaluations and budgets are restored, tool
  /// calls that had not been answered are run (finished ones are not repeated), and the
  /// episode goes on. An episode that was cancelled, hit a backend error or ran out of a
  /// budget goes on under the current options; one that completed, got stuck or ran out
  /// of context is only reported again.
  EpisodeResult resume(const Task& task, const std::filesystem::path& workspace, std::stop_token cancellation = {}) {
    if (!std::filesystem::exists(trajectory_path()))
      throw std::invalid_argument("cannot resume: there is no trajectory at " + trajectory_path().string() +
                                  "; start the episode with run()");
    const std::vector<nlohmann::json> events = TrajectoryWriter::read_events(trajectory_path());
    Episode episode = open_episode(task, workspace, std::move(cancellation), true);
    const detail::RestoredEpisode restored = restore(episode, events);
    if (restored.finished && !resumable(restored.finish_reason)) {
      episode.stop = restored.finish_reason;
      episode.stop_message = restored.finish_message;
      episode.final_evaluation_done = true;
      episode.finish_recorded = true;
      return finish(episode);
    }
    // Clients that play recorded answers (scripted, replay) skip the ones already used.
    if constexpr (ResumableLlmClient<Client>) client_.resume_after(episode.turn);

    const bool turn_open = !restored.last_response.message.tool_calls.empty() && restored.closed_turn < episode.turn;
    if (turn_open) {
      // The crash came inside a turn: answer the calls that had no answer yet (finished
      // ones are not repeated), then close the turn as it would have been closed.
      bool finish_called = restored.finish_called;
      for (const ToolCall& call : restored.unanswered) finish_called |= run_tool_call(episode, call);
      if (!end_of_turn(episode, restored.last_response, finish_called)) drive(episode);
    } else if (restored.finish_called) {
      stop(episode, StopReason::completed, "the model called Finish");
    } else if (restored.model_stopped) {
      stop(episode, StopReason::completed, "the model answered without calling a tool");
    } else if (options_.stuck_repeat_limit > 0 && episode.stuck_failures >= options_.stuck_repeat_limit) {
      stop(episode, StopReason::stuck,
           "the model repeated the same failing call " + std::to_string(episode.stuck_failures) +
               " times: " + episode.stuck_call);
    } else {
      drive(episode);
    }
    return finish(episode);
  }

 private:
  struct Episode {
    Episode(const Task& task_, std::filesystem::path workspace_, std::stop_token cancellation_,
            const std::filesystem::path& trajectory_path, const AgentOptions& options)
        : task(&task_),
          workspace(std::move(workspace_)),
          cancellation(std::move(cancellation_)),
          trajectory(std::make_unique<TrajectoryWriter>(trajectory_path)),
          window(options.context),
          tool_context(workspace, options.protected_paths) {}

    const Task* task;
    std::filesystem::path workspace;
    std::stop_token cancellation;
    std::unique_ptr<TrajectoryWriter> trajectory;
    ContextWindow window;
    ToolContext tool_context;
    std::vector<ToolSpec> specs;
    int turn = 0;
    Usage usage;
    double elapsed_before_s = 0;
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
    std::vector<ScoredCandidate> evaluations;
    std::optional<std::size_t> best;
    std::set<std::string> evaluated_hashes;
    bool verified_since_evaluation = false;
    detail::StuckDetector stuck;
    std::size_t stuck_failures = 0;
    std::string stuck_call;
    std::optional<StopReason> stop;
    std::string stop_message;
    bool resumed = false;
    bool final_evaluation_done = false;
    bool finish_recorded = false;
    std::vector<std::string> evaluation_errors;

    [[nodiscard]] double elapsed_s() const {
      return elapsed_before_s + std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    }
    [[nodiscard]] const ScoredCandidate* best_candidate() const { return best ? &evaluations[*best] : nullptr; }
  };

  // --- setup ------------------------------------------------------------------------------

  Episode open_episode(const Task& task, const std::filesystem::path& workspace, std::stop_token cancellation,
                       bool resuming) {
    if (options_.output_directory.empty())
      throw std::invalid_argument("AgentOptions::output_directory is empty: say where the trajectory and results go");
    if (!std::filesystem::is_directory(workspace))
      throw std::invalid_argument("the workspace " + workspace.string() + " is not a directory");
    if (!resuming && std::filesystem::exists(trajectory_path()) && std::filesystem::file_size(trajectory_path()) > 0)
      throw std::invalid_argument("the output directory " + options_.output_directory.string() +
                                  " already holds a trajectory: resume it, or choose another output directory");
    std::filesystem::create_directories(options_.output_directory);
    Episode episode(task, workspace, cancellation, trajectory_path(), options_);
    episode.tool_context.set_cancellation(cancellation);
    episode.tool_context.set_sandbox(SandboxRef(sandbox_));
    episode.specs = tools_.specs();
    if (options_.offer_finish_tool) episode.specs.push_back(detail::finish_tool_spec());
    episode.window.set_fixed_characters(nlohmann::json(episode.specs).dump().size());
    episode.resumed = resuming;
    if (!resuming) {
      nlohmann::json header = trajectory_event::header(
          {{"name", task.name}, {"hash", task.content_hash()}, {"origin", to_string(task.origin)}}, client_.name(),
          settings_json(workspace));
      header["tools"] = episode.specs;
      episode.trajectory->append(std::move(header));
    }
    return episode;
  }

  [[nodiscard]] nlohmann::json settings_json(const std::filesystem::path& workspace) const {
    const AgentBudget& budget = options_.budget;
    auto optional_number = [](const auto& value) { return value ? nlohmann::json(*value) : nlohmann::json(nullptr); };
    nlohmann::json settings = {
        {"workspace", workspace.string()},
        {"output_directory", options_.output_directory.string()},
        {"reward_policy", std::string(policy_.name())},
        {"max_turns", budget.max_turns},
        {"wall_time_s", budget.wall_time ? nlohmann::json(budget.wall_time->count()) : nlohmann::json(nullptr)},
        {"max_cost_usd", optional_number(budget.max_cost_usd)},
        {"max_total_tokens", optional_number(budget.max_total_tokens)},
        {"context_window_tokens", options_.context.window_tokens},
        {"context_reserve_tokens", options_.context.reserve_tokens},
        {"observation_char_limit", options_.context.observation_char_limit},
        {"max_output_tokens", optional_number(options_.max_output_tokens)},
        {"temperature", optional_number(options_.temperature)},
        {"seed", optional_number(options_.seed)},
        {"evaluate_when_verified", options_.evaluate_when_verified},
        {"stuck_repeat_limit", options_.stuck_repeat_limit}};
    if (budget.max_cost_usd && !budget.usd_per_million_prompt_tokens)
      settings["note"] = "the money budget applies only if the backend reports cost";
    return settings;
  }

  // --- the loop ---------------------------------------------------------------------------

  void drive(Episode& episode) {
    while (!episode.stop) {
      if (budget_exhausted(episode)) break;
      if (!fit_context(episode, false)) break;
      ++episode.turn;
      for (AgentObserver* observer : observers_) observer->on_turn_start(progress(episode));
      std::optional<ChatResponse> response = ask_model(episode);
      if (!response) break;
      if (response->message.tool_calls.empty()) {
        if (response->finish_reason == FinishReason::length) {
          record_message(episode, Message::user(std::string(detail::output_cut_off_note)));
          notify_turn_end(episode, *response);
          continue;
        }
        notify_turn_end(episode, *response);
        stop(episode, StopReason::completed, "the model answered without calling a tool");
        break;
      }
      bool finish_called = false;
      for (const ToolCall& call : response->message.tool_calls) finish_called |= run_tool_call(episode, call);
      if (end_of_turn(episode, *response, finish_called)) break;
    }
  }

  /// Everything after a turn's tool calls: stuck detection, trusted scoring, budget
  /// record, observers. Returns true when the episode stops here.
  bool end_of_turn(Episode& episode, const ChatResponse& response, bool finish_called) {
    if (options_.stuck_repeat_limit > 0 && episode.stuck_failures >= options_.stuck_repeat_limit)
      stop(episode, StopReason::stuck,
           "the model repeated the same failing call " + std::to_string(episode.stuck_failures) +
               " times: " + episode.stuck_call);
    if (options_.evaluate_when_verified && episode.verified_since_evaluation && !episode.cancellation.stop_requested())
      evaluate_candidate(episode, true);
    record_budget(episode);
    notify_turn_end(episode, response);
    if (finish_called && !episode.stop) stop(episode, StopReason::completed, "the model called Finish");
    return episode.stop.has_value();
  }

  void notify_turn_end(Episode& episode, const ChatResponse& response) {
    for (AgentObserver* observer : observers_) observer->on_turn_end(progress(episode), response);
  }

  [[nodiscard]] EpisodeProgress progress(const Episode& episode) const {
    return {episode.turn,
            options_.budget.max_turns,
            episode.usage,
            episode.elapsed_s(),
            episode.window.estimated_tokens(),
            episode.window.window_tokens(),
            episode.best_candidate()};
  }

  void stop(Episode& episode, StopReason reason, const std::string& message) {
    if (episode.stop) return;
    episode.stop = reason;
    episode.stop_message = message;
  }

  bool budget_exhausted(Episode& episode) {
    if (episode.cancellation.stop_requested())
      stop(episode, StopReason::cancelled, "the episode was cancelled");
    else if (const auto spent = spent_budget(options_.budget, episode.turn, episode.elapsed_s(), episode.usage))
      stop(episode, spent->reason, spent->message);
    return episode.stop.has_value();
  }

  /// Compacts when the prompt nears the window (or the backend said it overflowed).
  /// Returns false, having stopped the episode, when it cannot be made to fit.
  bool fit_context(Episode& episode, bool overflowed) {
    ContextWindow& window = episode.window;
    if (overflowed) window.note_overflow();
    if (!overflowed && !window.needs_compaction()) return true;
    const CompactionOutcome outcome = window.compact(overflowed);
    for (const nlohmann::json& operation : outcome.operations)
      episode.trajectory->append(
          trajectory_event::compaction(episode.turn, operation.at("kind").get<std::string>(), operation.at("detail")));
    if (!outcome.operations.empty())
      for (AgentObserver* observer : observers_)
        observer->on_compaction(episode.turn, outcome.tokens_before, outcome.tokens_after);
    if ((overflowed && !outcome.shrunk()) || window.needs_compaction()) {
      stop(episode, StopReason::context_exhausted,
           "the prompt (about " + std::to_string(window.estimated_tokens()) +
               " tokens) does not fit the context window (" + std::to_string(window.window_tokens()) + " tokens, " +
               std::to_string(options_.context.reserve_tokens) +
               " kept for the answer) even after compaction: what is left is the system prompt, the task, the "
               "best result and the newest turn. Use a model with a larger context window, or a shorter "
               "SKILL.md or task.");
      return false;
    }
    return true;
  }

  /// One model call, with one compaction and retry on a context overflow. Returns
  /// nothing, having stopped the episode, when the call cannot succeed.
  std::optional<ChatResponse> ask_model(Episode& episode) {
    for (int attempt = 0;; ++attempt) {
      ChatRequest request;
      request.messages = episode.window.messages();
      request.tools = episode.specs;
      request.parallel_tool_calls = options_.parallel_tool_calls;
      request.max_tokens = options_.max_output_tokens;
      request.temperature = options_.temperature;
      request.seed = options_.seed;
      request.extra_body = options_.extra_body;
      request.cancellation = episode.cancellation;
      const std::size_t characters = episode.window.characters();
      const auto started = std::chrono::steady_clock::now();
      try {
        ChatResponse response = client_.complete(request);
        const double duration_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
        episode.window.calibrate(response.usage.prompt_tokens, characters);
        price_usage(options_.budget, response.usage);
        episode.usage += response.usage;
        nlohmann::json event = trajectory_event::assistant(episode.turn, response, duration_ms);
        episode.trajectory->append(std::move(event));
        episode.window.append(response.message);
        return response;
      } catch (const LlmError& error) {
        if (error.kind() == LlmErrorKind::cancelled || episode.cancellation.stop_requested()) {
          stop(episode, StopReason::cancelled, "the episode was cancelled while the model was answering");
          return std::nullopt;
        }
        if (error.kind() == LlmErrorKind::context_overflow) {
          if (attempt == 0 && fit_context(episode, true)) continue;
          stop(episode, StopReason::context_exhausted,
               std::string("the backend still rejects the prompt as too long after compaction: ") + error.what());
          return std::nullopt;
        }
        stop(episode, StopReason::llm_error,
             "the model backend failed (" + std::string(to_string(error.kind())) +
                 (error.http_status() ? ", HTTP " + std::to_string(error.http_status()) : std::string()) + ", after " +
                 std::to_string(error.attempts()) + " attempts): " + error.what() +
                 ". The trajectory is complete up to here: resume the episode once the backend works again.");
        return std::nullopt;
      }
    }
  }

  /// Runs one call and answers it. Returns true if it was the Finish call.
  bool run_tool_call(Episode& episode, const ToolCall& call) {
    for (AgentObserver* observer : observers_) observer->on_tool_start(episode.turn, call);
    const auto started = std::chrono::steady_clock::now();
    const bool is_finish = options_.offer_finish_tool && call.name == "Finish";
    ToolResult result;
    if (episode.cancellation.stop_requested()) {
      result = ToolResult::error("Not run: the episode was cancelled.");
    } else if (is_finish) {
      result = ToolResult::success(std::string(detail::finish_answer));
    } else {
      try {
        result = tools_.invoke(call, episode.tool_context);
      } catch (const std::exception& error) {
        result = ToolResult::error("Error: " + call.name + " failed: " + error.what(), {{"exception", true}});
      }
    }
    const double duration_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();

    std::string content = cap_observation(result.content, options_.context.observation_char_limit);
    if (content.size() != result.content.size())
      result.metadata["observation_elided_characters"] =
          result.content.size() - std::min(result.content.size(), content.size());
    note_outcome(episode, call, result);
    if (options_.stuck_repeat_limit > 1 && episode.stuck_failures + 1 == options_.stuck_repeat_limit)
      content += detail::stuck_warning(episode.stuck_failures);

    const Message message = Message::tool_result(call.id, call.name, std::move(content), result.is_error);
    episode.trajectory->append(trajectory_event::tool_result(episode.turn, message, duration_ms, result.metadata));
    episode.window.append(message);
    for (AgentObserver* observer : observers_) observer->on_tool_call(episode.turn, call, result, duration_ms);
    return is_finish;
  }

  [[nodiscard]] static std::string describe_call(const ToolCall& call) {
    std::string arguments = call.arguments.dump();
    if (arguments.size() > 200) arguments = arguments.substr(0, 200) + "...";
    return call.name + " " + arguments;
  }

  /// What a finished call means for the episode: stuck detection and verification.
  void note_outcome(Episode& episode, const ToolCall& call, const ToolResult& result) {
    episode.stuck_failures = episode.stuck.record(call, result.is_error);
    episode.stuck_call = episode.stuck_failures > 0 ? describe_call(call) : std::string();
    if (options_.is_verification(call, result)) episode.verified_since_evaluation = true;
  }

  void record_message(Episode& episode, Message message, ContextRole role = ContextRole::normal) {
    nlohmann::json event = trajectory_event::message(episode.turn, message);
    if (role != ContextRole::normal) event["context_role"] = to_string(role);
    episode.trajectory->append(std::move(event));
    episode.window.append(std::move(message), role);
  }

  void record_budget(Episode& episode) {
    nlohmann::json event = trajectory_event::budget(episode.turn, episode.turn, episode.usage, episode.elapsed_s());
    event["context_tokens"] = episode.window.estimated_tokens();
    event["context_window"] = episode.window.window_tokens();
    episode.trajectory->append(std::move(event));
  }

  // --- trusted scoring --------------------------------------------------------------------

  /// Scores the workspace's candidate if it changed since it was last scored.
  void evaluate_candidate(Episode& episode, bool during_episode) {
    episode.verified_since_evaluation = false;
    std::string hash;
    try {
      hash = detail::candidate_hash(episode.workspace);
    } catch (const std::exception& error) {
      episode.evaluation_errors.push_back(std::string("cannot read the candidate files: ") + error.what());
      return;
    }
    if (hash.empty() || episode.evaluated_hashes.contains(hash)) return;
    episode.evaluated_hashes.insert(hash);

    ScoredCandidate candidate;
    candidate.turn = episode.turn;
    candidate.hash = hash;
    candidate.directory = options_.output_directory / "snapshots" / hash.substr(0, 16);
    try {
      detail::snapshot_candidate(episode.workspace, candidate.directory);
      candidate.evaluation = evaluator_.evaluate(*episode.task, candidate.directory);
      candidate.reward = policy_.reward(candidate.evaluation);
    } catch (const std::exception& error) {
      const std::string message =
          std::string("the trusted evaluation failed (not the candidate's fault): ") + error.what();
      episode.evaluation_errors.push_back(message);
      episode.trajectory->append(
          {{"type", "evaluation_error"}, {"turn", episode.turn}, {"candidate_hash", hash}, {"message", message}});
      return;
    }
    const bool is_best = !episode.best || candidate.better_than(episode.evaluations[*episode.best]);
    episode.evaluations.push_back(candidate);
    if (is_best) {
      episode.best = episode.evaluations.size() - 1;
      publish_best(candidate);
    }
    nlohmann::json event =
        trajectory_event::evaluation(episode.turn, hash, candidate.evaluation, candidate.reward, is_best);
    event["directory"] = candidate.directory.string();
    episode.trajectory->append(std::move(event));
    for (AgentObserver* observer : observers_) observer->on_evaluation(candidate, is_best);
    if (during_episode && options_.report_evaluations_to_model)
      record_message(episode, Message::user(detail::describe_evaluation(candidate, *episode.best_candidate(), is_best)),
                     is_best ? ContextRole::best_result : ContextRole::normal);
  }

  void publish_best(const ScoredCandidate& candidate) {
    const std::filesystem::path best = options_.output_directory / "best";
    detail::snapshot_candidate(candidate.directory, best);
  }

  // --- finishing --------------------------------------------------------------------------

  EpisodeResult finish(Episode& episode) {
    if (!episode.stop) stop(episode, StopReason::completed, "the episode ended");
    if (!episode.final_evaluation_done && *episode.stop != StopReason::cancelled) {
      episode.final_evaluation_done = true;
      evaluate_candidate(episode, false);
    }
    EpisodeResult result;
    result.reason = *episode.stop;
    result.message = episode.stop_message;
    for (const std::string& error : episode.evaluation_errors) result.message += "; " + error;
    result.turns = episode.turn;
    result.usage = episode.usage;
    result.elapsed = std::chrono::duration<double>(episode.elapsed_s());
    result.evaluations = episode.evaluations;
    if (episode.best) {
      result.best = episode.evaluations[*episode.best];
      result.best_directory = options_.output_directory / "best";
    }
    result.trajectory = trajectory_path();
    result.output_directory = options_.output_directory;
    result.resumed = episode.resumed;

    if (!episode.finish_recorded) {
      record_budget(episode);
      episode.trajectory->append(
          trajectory_event::finish(to_string(result.reason), result.message,
                                   result.best ? summary_json(*result.best) : nlohmann::json(nullptr)));
    }
    if (options_.write_reports) write_episode_reports(result, *episode.task, client_.name(), options_.output_directory);
    for (AgentObserver* observer : observers_) observer->on_finish(result);
    return result;
  }

  // --- resuming ---------------------------------------------------------------------------

  detail::RestoredEpisode restore(Episode& episode, const std::vector<nlohmann::json>& events) {
    detail::RestoredEpisode restored;
    bool seen_header = false;
    std::set<std::string> answered;
    for (const nlohmann::json& event : events) {
      const std::string type = event.value("type", "");
      if (type == "header") {
        seen_header = true;
        const std::string hash = event.at("task").value("hash", "");
        if (hash != episode.task->content_hash())
          throw std::invalid_argument("cannot resume " + trajectory_path().string() + ": it records task '" +
                                      event.at("task").value("name", "") +
                                      "', whose reference differs from the task given now");
      } else if (type == "message") {
        const Message message = event.at("message").get<Message>();
        episode.turn = std::max(episode.turn, event.value("turn", 0));
        episode.window.append(message, parse_context_role(event.value("context_role", "normal")));
        if (message.role == Role::assistant) {
          Usage usage = event.value("usage", Usage{});
          episode.usage += usage;
          restored.last_response = ChatResponse{
              message, parse_finish_reason(event.value("finish_reason", "")), usage, event.value("model", ""), {}};
          restored.unanswered = message.tool_calls;
          restored.finish_called = false;
          restored.model_stopped =
              message.tool_calls.empty() && restored.last_response.finish_reason != FinishReason::length;
        } else if (message.role == Role::tool) {
          const auto call = std::find_if(restored.unanswered.begin(), restored.unanswered.end(),
                                         [&](const ToolCall& each) { return each.id == message.tool_call_id; });
          if (call == restored.unanswered.end()) continue;
          const ToolResult result{message.content, message.is_error, event.value("metadata", nlohmann::json::object())};
          note_outcome(episode, *call, result);
          detail::restore_file_knowledge(episode.workspace, episode.tool_context, *call, result);
          if (options_.offer_finish_tool && call->name == "Finish") restored.finish_called = true;
          restored.unanswered.erase(call);
        } else if (message.role == Role::user) {
          restored.model_stopped = false;
        }
      } else if (type == "compaction") {
        episode.window.apply({{"kind", event.at("kind")}, {"detail", event.at("detail")}});
      } else if (type == "evaluation") {
        ScoredCandidate candidate;
        candidate.turn = event.value("turn", 0);
        candidate.hash = event.value("candidate_hash", "");
        candidate.directory = event.value("directory", "");
        candidate.evaluation = event.value("evaluation", Evaluation{});
        candidate.reward = event.value("reward", Reward{});
        episode.evaluated_hashes.insert(candidate.hash);
        episode.evaluations.push_back(std::move(candidate));
        if (event.value("best", false)) episode.best = episode.evaluations.size() - 1;
        episode.verified_since_evaluation = false;
      } else if (type == "evaluation_error") {
        episode.evaluated_hashes.insert(event.value("candidate_hash", ""));
      } else if (type == "budget") {
        episode.elapsed_before_s = event.value("elapsed_s", episode.elapsed_before_s);
        restored.closed_turn = event.value("turn", 0);
      } else if (type == "finish") {
        restored.finished = true;
        restored.finish_reason = parse_stop_reason(event.value("reason", "")).value_or(StopReason::completed);
        restored.finish_message = event.value("message", "");
      }
    }
    if (!seen_header)
      throw std::invalid_argument("cannot resume " + trajectory_path().string() + ": it has no header event");
    episode.started = std::chrono::steady_clock::now();
    return restored;
  }

  Client client_;
  Tools tools_;
  SandboxType sandbox_;
  EvaluatorType evaluator_;
  Policy policy_;
  AgentOptions options_;
  std::vector<AgentObserver*> observers_;
};

}  // namespace cuda_agent

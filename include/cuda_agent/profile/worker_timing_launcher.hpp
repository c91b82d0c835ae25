// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Timing sessions in the verifier's warm harness workers: the reference side runs as a
/// child of the reference worker, the candidate side as a child of the (sandboxed)
/// candidate worker, each forked from a process that has torch imported already. This is
/// what makes an evaluation after a one-line edit take seconds: no interpreter starts.
///
/// The session uses the verifier's work directory and its sandboxes' view of it:
///   - `candidates/timing-<id>/`: a pristine copy of model_new.py and the built module
///     (read-only to the candidate worker, hidden from the reference worker);
///   - `sessions/timing-<id>/`: the two FIFOs, and `out/` where the candidate side writes
///     the outputs it hands over (the reference worker reads them, read-only);
///   - `references/<task hash>/model.py`: the reference, read-only to both;
///   - `rendezvous/timing-<id>.sock`: where the reference side hands the candidate side the
///     memory of the trusted batches (created by the reference worker, which alone may write
///     there);
///   - `scratch/reference/baseline-cache/` and `scratch/reference/compile-cache/`: the
///     baseline cache and torch.compile's caches, writable by the reference worker only.
///     They last as long as the verifier's work directory (give the verifier a persistent
///     one to keep baselines between runs).
/// The workers must not be used by anything else while a session runs (the evaluator
/// verifies, then profiles).

#include <chrono>      // seconds, steady_clock
#include <filesystem>  // path, copy_file, permissions
#include <fstream>     // ofstream
#include <map>         // map
#include <memory>      // shared_ptr
#include <optional>    // optional
#include <stdexcept>   // runtime_error
#include <string>      // string
#include <thread>      // jthread
#include <utility>     // move

#include <nlohmann/json.hpp>

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/detail/harness_session.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/profile/harness_profiler.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/verifier.hpp"
#include "cuda_agent/verify/harness_verifier.hpp"
#include "cuda_agent/verify/harness_worker.hpp"

namespace cuda_agent {

class WorkerTimingLauncher {
 public:
  explicit WorkerTimingLauncher(std::shared_ptr<HarnessVerifier> verifier) : verifier_(std::move(verifier)) {
    if (!verifier_) throw std::invalid_argument("WorkerTimingLauncher needs a HarnessVerifier");
  }

  [[nodiscard]] TimingSessionOutcome launch(const Task& task, const Candidate& candidate,
                                            nlohmann::json reference_request, nlohmann::json candidate_request,
                                            std::chrono::seconds timeout) {
    HarnessWorker& reference = verifier_->reference_worker();
    HarnessWorker& candidate_worker = verifier_->candidate_worker();
    const HarnessOptions& options = verifier_->options();
    const std::filesystem::path root = options.work_directory;
    const std::string id = "timing-" + detail::random_hex(8);
    const std::filesystem::path rendezvous = root / "rendezvous" / (id + ".sock");
    // What runs: the candidate's model_new.py and its built module, copied by the host.
    const std::map<std::string, std::string> files = read_candidate_sources(candidate.source_directory).files;
    const auto model = files.find(std::string(candidate_model_file));
    if (model == files.end()) throw std::runtime_error("the candidate has no model_new.py to time");
    const std::optional<std::filesystem::path> module = built_module(candidate.build_directory);
    if (!module) throw std::runtime_error("no built cuda_extension in " + candidate.build_directory.string());
    detail::HarnessSessionFiles session(root, id, model->second, *module, options.candidate_identity);
    session.remove_with_session(rendezvous);  // left behind only by a reference side that died

    const std::filesystem::path reference_file = root / "references" / task.content_hash() / "model.py";
    if (!std::filesystem::exists(reference_file)) {
      detail::make_open_directory(reference_file.parent_path());
      detail::write_file_atomically(reference_file, task.reference_source);
    }
    const std::filesystem::path scratch = root / "scratch" / "reference";
    const std::filesystem::path gone = session.directory() / "candidate-gone";
    reference_request["reference_path"] = reference_file.string();
    reference_request["session"] = session.directory().string();
    reference_request["output_directory"] = session.output().string();
    reference_request["candidate_gone_marker"] = gone.string();
    reference_request["trusted_socket"] = rendezvous.string();
    reference_request["compile_cache_directory"] = (scratch / "compile-cache").string();
    if (reference_request.contains("baseline_cache"))
      reference_request["baseline_cache"]["directory"] = (scratch / "baseline-cache").string();
    // The weights as the verification had them: perturbed, and enlarged where the audit said.
    const nlohmann::json gains = verifier_->known_weight_gains(task);
    reference_request["weight_gains"] = gains;
    candidate_request["weight_gains"] = gains;
    candidate_request["reference_path"] = reference_file.string();
    candidate_request["session"] = session.directory().string();
    candidate_request["candidate_directory"] = session.copy().string();
    candidate_request["build_directory"] = session.copy().string();

    const auto milliseconds = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    TimingSessionOutcome outcome;
    // Nothing of an earlier request (the verification's processes letting go of the
    // device) may overlap the session: both workers first wait for their children's exit.
    const auto settle_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    outcome.settled_ms = reference.settle(settle_deadline) + candidate_worker.settle(settle_deadline);
    const std::string reference_id =
        reference.submit("timing_reference", reference_request, milliseconds + std::chrono::seconds(30));
    std::string candidate_id;
    try {
      candidate_id = candidate_worker.submit("timing_candidate", candidate_request, milliseconds);
    } catch (const HarnessError&) {
      reference.cancel(reference_id);
      (void)reference.wait(reference_id, deadline + std::chrono::seconds(60));
      throw;
    }
    std::optional<HarnessReply> candidate_reply;
    std::string candidate_failure;
    std::optional<HarnessReply> reference_reply;
    {
      std::jthread candidate_side([&] {
        try {
          candidate_reply = candidate_worker.wait(candidate_id, deadline + std::chrono::seconds(30));
        } catch (const std::exception& error) {
          candidate_failure = error.what();
        }
        std::ofstream{gone};  // lets a reference side still waiting for it give up
      });
      try {
        reference_reply = reference.wait(reference_id, deadline + std::chrono::seconds(60));
      } catch (const std::exception& error) {
        outcome.reference_failure = error.what();
      }
    }
    if (reference_reply && reference_reply->has_result() && reference_reply->result().is_object()) {
      outcome.reference_result = reference_reply->result();
    } else if (reference_reply) {
      outcome.reference_failure = "the reference side failed: " + reference_reply->error_text() + " " +
                                  detail::capped(reference_reply->output(), 4000);
    }
    if (candidate_reply) {
      outcome.candidate_side = {{"exit_code", candidate_reply->message.value("exit_code", nlohmann::json())},
                                {"signal", candidate_reply->message.value("signal", nlohmann::json())},
                                {"timed_out", candidate_reply->timed_out()},
                                {"stragglers", candidate_reply->stragglers()},
                                {"error", candidate_reply->error_text()},
                                {"output", detail::capped(candidate_reply->output(), 4000)},
                                {"worker", "candidate harness worker"}};
    } else {
      outcome.candidate_side = {{"worker_error", candidate_failure}};
    }
    return outcome;
  }

 private:
  static std::optional<std::filesystem::path> built_module(const std::filesystem::path& build_directory) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(build_directory, error)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(std::string(candidate_extension_name) + ".", 0) == 0 && name.ends_with(".so")) return entry.path();
    }
    return std::nullopt;
  }

  std::shared_ptr<HarnessVerifier> verifier_;
};

static_assert(TimingLauncher<WorkerTimingLauncher>);

}  // namespace cuda_agent

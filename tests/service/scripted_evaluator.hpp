// SPDX-License-Identifier: Apache-2.0
#pragma once

// A staged evaluator whose behaviour each task's name picks, for the tests of the pool and
// the service: scheduling is what they test, not verdicts.

#include <cuda_agent/evaluate/staged_evaluator.hpp>

#include <algorithm>           // max
#include <chrono>              // milliseconds
#include <condition_variable>  // condition_variable
#include <filesystem>          // path, exists
#include <map>                 // map
#include <memory>              // shared_ptr
#include <mutex>               // mutex, unique_lock, lock_guard
#include <stdexcept>           // runtime_error
#include <string>              // string
#include <thread>              // sleep_for
#include <vector>              // vector

namespace cuda_agent::testing {

namespace ca = cuda_agent;
using namespace std::chrono_literals;

/// What the scripted evaluators saw, shared by the builder and every slot's evaluator.
struct Script {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, int> prepared;  // by task name
  std::vector<std::string> verified;    // task names, in order
  int verifying_now = 0;
  int most_verifying = 0;
  bool timed_beside_verification = false;
  int timing_now = 0;
  int evaluators_made = 0;
  /// Verification of a task named "hold" waits until this is set.
  bool release = false;
};

/// Behaviour by task name: "refused" is not built; "wrong" verifies incorrect; "crash"
/// throws in verification; "harness" fails with a harness error; "slow" and "hold" take
/// their time; "oom" runs out of device memory when another verification runs beside it,
/// "oom_always" whatever runs beside it; "mem<G>" takes its time and reports that its
/// reference held G GiB of device memory; anything else is correct and timed. The request's
/// policy, as it reached the evaluator, is in the verification's and the profile's details.
struct ScriptedEvaluator {
  std::shared_ptr<Script> script;

  ca::PreparedCandidate prepare(const ca::Task& task, const std::filesystem::path& directory,
                                const ca::EvaluationPolicy& policy = {}) {
    ca::PreparedCandidate prepared{task, {}, {}, nullptr, policy};
    // Built from the files it was given: none, no build.
    prepared.evaluation.compile.succeeded =
        task.name != "refused" && std::filesystem::exists(directory / "model_new.py");
    const std::lock_guard lock(script->mutex);
    ++script->prepared[task.name];
    script->changed.notify_all();
    return prepared;
  }

  void verify(ca::PreparedCandidate& prepared) {
    const std::string& name = prepared.task.name;
    bool crowded = false;
    {
      std::unique_lock lock(script->mutex);
      script->verified.push_back(name);
      script->changed.notify_all();
      ++script->verifying_now;
      script->most_verifying = std::max(script->most_verifying, script->verifying_now);
      crowded = script->verifying_now > 1;
      if (script->timing_now > 0) script->timed_beside_verification = true;
      if (name == "hold") script->changed.wait(lock, [&] { return script->release; });
    }
    const bool measured = name.rfind("mem", 0) == 0;
    if (name == "slow" || name.rfind("busy", 0) == 0) std::this_thread::sleep_for(60ms);
    if (measured) std::this_thread::sleep_for(150ms);
    {
      const std::lock_guard lock(script->mutex);
      --script->verifying_now;
    }
    if (name == "crash") throw std::runtime_error("the worker process was lost");
    ca::VerificationResult result;
    result.correct = name != "wrong" && name != "harness";
    if (name == "wrong") result.rejection = ca::Rejection{ca::RejectionReason::value_mismatch, "wrong at (0, 0)", {}};
    if (name == "harness")
      result.rejection = ca::Rejection{ca::RejectionReason::harness_error, "the harness crashed", {}};
    if ((name == "oom" && crowded) || name == "oom_always") {
      result.correct = false;
      result.rejection = ca::Rejection{ca::RejectionReason::runtime_error,
                                       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                                       {}};
    }
    result.details["policy"] = prepared.policy;
    if (measured)
      result.details["footprint"] = {{"peak_device_bytes", std::stoull(name.substr(3)) << 30U}, {"parameter_bytes", 0}};
    prepared.evaluation.verification = result;
  }

  void profile(ca::PreparedCandidate& prepared) {
    {
      const std::lock_guard lock(script->mutex);
      ++script->timing_now;
      if (script->verifying_now > 0) script->timed_beside_verification = true;
    }
    std::this_thread::sleep_for(20ms);
    {
      const std::lock_guard lock(script->mutex);
      --script->timing_now;
      if (script->verifying_now > 0) script->timed_beside_verification = true;
    }
    prepared.evaluation.profile = ca::ProfileResult{};
    prepared.evaluation.profile->details["policy"] = prepared.policy;
  }

  ca::Evaluation evaluate(const ca::Task& task, const std::filesystem::path& directory) {
    ca::PreparedCandidate prepared = prepare(task, directory);
    verify(prepared);
    profile(prepared);
    return prepared.evaluation;
  }
};
static_assert(ca::PolicyStagedEvaluator<ScriptedEvaluator>);

}  // namespace cuda_agent::testing

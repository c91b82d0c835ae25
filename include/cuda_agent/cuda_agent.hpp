// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Everything in the core of cuda_agent. Optional components have their own umbrella
/// headers: cuda_agent/http/http.hpp (libcurl) and cuda_agent/cuda/cuda.hpp (CUDA runtime).

#include "cuda_agent/version.hpp"
#include "cuda_agent/fwd.hpp"

#include "cuda_agent/message.hpp"
#include "cuda_agent/process.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/task_loader.hpp"
#include "cuda_agent/workspace.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/tolerance.hpp"
#include "cuda_agent/resources.hpp"
#include "cuda_agent/trajectory.hpp"

#include "cuda_agent/llm_client.hpp"
#include "cuda_agent/llm_transport.hpp"
#include "cuda_agent/scripted_client.hpp"
#include "cuda_agent/replay_client.hpp"
#include "cuda_agent/llm_spec.hpp"
#include "cuda_agent/tool.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/sandbox_options.hpp"
#include "cuda_agent/process_sandbox.hpp"
#include "cuda_agent/bubblewrap_sandbox.hpp"
#include "cuda_agent/cuda_probe.hpp"
#include "cuda_agent/verifier.hpp"
#include "cuda_agent/profiler.hpp"
#include "cuda_agent/reward_policy.hpp"
#include "cuda_agent/reward_policies.hpp"
#include "cuda_agent/timing_statistics.hpp"
#include "cuda_agent/harness_profiler.hpp"
#include "cuda_agent/worker_timing_launcher.hpp"
#include "cuda_agent/profile_report.hpp"
#include "cuda_agent/tools/profile_tool.hpp"
#include "cuda_agent/evaluator.hpp"

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/library_policy.hpp"
#include "cuda_agent/compile_driver.hpp"
#include "cuda_agent/tools/compile_tool.hpp"

#include "cuda_agent/harness_worker.hpp"
#include "cuda_agent/harness_verifier.hpp"
#include "cuda_agent/verification_summary.hpp"
#include "cuda_agent/trusted_evaluator.hpp"
#include "cuda_agent/tools/verify_tool.hpp"

#include "cuda_agent/tools/tools.hpp"

#include "cuda_agent/context_window.hpp"
#include "cuda_agent/agent_result.hpp"
#include "cuda_agent/agent_observer.hpp"
#include "cuda_agent/agent_report.hpp"
#include "cuda_agent/agent_loop.hpp"
#include "cuda_agent/optimize.hpp"

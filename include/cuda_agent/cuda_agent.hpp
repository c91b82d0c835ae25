// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Everything in the core of cuda_agent. Optional components have their own umbrella
/// headers: cuda_agent/http/http.hpp (libcurl) and cuda_agent/cuda/cuda.hpp (CUDA runtime).

#include "cuda_agent/fwd.hpp"
#include "cuda_agent/version.hpp"

// Vocabulary.
#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/evaluation_policy.hpp"
#include "cuda_agent/library_policy.hpp"
#include "cuda_agent/message.hpp"
#include "cuda_agent/process.hpp"
#include "cuda_agent/resources.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/tolerance.hpp"
#include "cuda_agent/trajectory.hpp"

// Contracts.
#include "cuda_agent/evaluator.hpp"
#include "cuda_agent/llm_client.hpp"
#include "cuda_agent/profiler.hpp"
#include "cuda_agent/reward_policy.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/tool.hpp"
#include "cuda_agent/verifier.hpp"

// llm/, sandbox/, tasks/, tools/.
#include "cuda_agent/llm/llm_spec.hpp"
#include "cuda_agent/llm/llm_transport.hpp"
#include "cuda_agent/llm/replay_client.hpp"
#include "cuda_agent/llm/scripted_client.hpp"
#include "cuda_agent/sandbox/bubblewrap_sandbox.hpp"
#include "cuda_agent/sandbox/cuda_probe.hpp"
#include "cuda_agent/sandbox/process_sandbox.hpp"
#include "cuda_agent/sandbox/sandbox_options.hpp"
#include "cuda_agent/sandbox/visible_gpus.hpp"
#include "cuda_agent/tasks/kernelbench_generation.hpp"
#include "cuda_agent/tasks/task_loader.hpp"
#include "cuda_agent/tasks/workspace.hpp"
#include "cuda_agent/tools/tools.hpp"

// compile/, verify/, profile/: each with the tool that drives it.
#include "cuda_agent/compile/compile_driver.hpp"
#include "cuda_agent/compile/compile_options.hpp"
#include "cuda_agent/compile/compile_tool.hpp"
#include "cuda_agent/compile/toolchain.hpp"
#include "cuda_agent/profile/harness_profiler.hpp"
#include "cuda_agent/profile/profile_report.hpp"
#include "cuda_agent/profile/profile_tool.hpp"
#include "cuda_agent/profile/timing_statistics.hpp"
#include "cuda_agent/profile/worker_timing_launcher.hpp"
#include "cuda_agent/verify/harness_verifier.hpp"
#include "cuda_agent/verify/harness_worker.hpp"
#include "cuda_agent/verify/verification_summary.hpp"
#include "cuda_agent/verify/verify_tool.hpp"

// evaluate/.
#include "cuda_agent/evaluate/reward_policies.hpp"
#include "cuda_agent/evaluate/staged_evaluator.hpp"
#include "cuda_agent/evaluate/trusted_evaluator.hpp"

// agent/.
#include "cuda_agent/agent/agent_loop.hpp"
#include "cuda_agent/agent/agent_observer.hpp"
#include "cuda_agent/agent/agent_report.hpp"
#include "cuda_agent/agent/agent_result.hpp"
#include "cuda_agent/agent/budget.hpp"
#include "cuda_agent/agent/context_window.hpp"
#include "cuda_agent/agent/optimize.hpp"
#include "cuda_agent/agent/prompts.hpp"
#include "cuda_agent/agent/resume.hpp"

// bench/.
#include "cuda_agent/bench/table_metrics.hpp"

// service/.
#include "cuda_agent/service/evaluation_pool.hpp"
#include "cuda_agent/service/evaluation_service.hpp"
#include "cuda_agent/service/remote_worker.hpp"
#include "cuda_agent/service/worker_protocol.hpp"

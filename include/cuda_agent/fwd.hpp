// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Forward declarations of the library's public types, for headers that only name them.

namespace cuda_agent {

// message.hpp
enum class Role;
enum class FinishReason;
enum class LlmErrorKind;
struct ToolCall;
struct Reasoning;
struct Message;
struct Usage;
struct ToolSpec;
struct ToolChoice;
struct StreamDelta;
struct ChatRequest;
struct ChatResponse;
class LlmError;

// llm_client.hpp
class AnyLlmClient;

// llm/llm_transport.hpp
struct RetryPolicy;
struct Timeouts;
struct TlsOptions;
struct ProxyOptions;
struct RetryNotice;
struct TransportOptions;

// llm/scripted_client.hpp, llm/replay_client.hpp, llm/llm_spec.hpp
struct ScriptedError;
class ScriptedClient;
struct ReplayDivergence;
struct ReplayOptions;
class ReplayClient;
class LlmSpecError;
struct LlmSpec;

// http/ (component http)
namespace http {
enum class OpenAiDialect;
struct OpenAiOptions;
class OpenAiClient;
struct AnthropicOptions;
class AnthropicClient;
class CurlTransport;
struct HttpResult;
}  // namespace http

// tool.hpp
struct ToolResult;
class ToolContext;
class AnyTool;
class ToolRegistry;

// process.hpp
class Environment;
struct UserIdentity;
struct ChildSetup;
struct ProcessSpec;
struct CapturedOutput;
struct ProcessResult;
class ProcessError;

// sandbox.hpp
struct ResourceLimits;
enum class LimitKind;
struct LimitStatus;
struct Command;
struct CommandResult;
class SandboxError;
class AnySandbox;
class SandboxRef;

// sandbox/sandbox_options.hpp, sandbox/process_sandbox.hpp, sandbox/bubblewrap_sandbox.hpp, sandbox/cuda_probe.hpp
struct Mount;
struct SandboxOptions;
using SandboxIdentity = UserIdentity;
class ProcessSandbox;
class BubblewrapSandbox;
struct CudaDevice;
struct CudaProbe;

// task.hpp
enum class TaskOrigin;
struct Task;

// evaluation.hpp
struct Candidate;
enum class DiagnosticSeverity;
struct Diagnostic;
struct CompileResult;
enum class RejectionReason;
struct Rejection;
struct VerificationResult;
enum class Verdict;
enum class TimingRegime;
struct TimingStats;
struct SpeedupEstimate;
struct ProfileResult;
struct Evaluation;
struct Reward;

// tolerance.hpp
struct Tolerance;
struct TolerancePolicy;

// evaluation_policy.hpp
struct EvaluationPolicy;

// trajectory.hpp
class TrajectoryWriter;

// verifier.hpp, profiler.hpp, reward_policy.hpp
class AnyVerifier;
class AnyProfiler;
class AnyRewardPolicy;

// profile/timing_statistics.hpp
struct SpeedupOptions;
class SeededGenerator;
enum class SamplePairing;
struct RatioOfMedians;

// profile/harness_profiler.hpp
struct TimingBudget;
struct HarnessProfilerOptions;
class HarnessProfiler;
struct TimingSessionOutcome;
class ProcessTimingLauncher;

// profile/worker_timing_launcher.hpp
class WorkerTimingLauncher;

// profile/profile_tool.hpp
struct ProfileToolOptions;

// evaluate/reward_policies.hpp
class MilestoneReward;
class SpeedupReward;

// evaluator.hpp
class AnyEvaluator;

// tasks/kernelbench_generation.hpp
struct GenerationConversion;
struct GenerationConversionOptions;

// tasks/task_loader.hpp
class TaskLoadError;
struct ConstructorParameter;
struct ReferenceModule;

// tasks/workspace.hpp
class WorkspaceError;
struct Workspace;
struct WorkspaceOptions;

// candidate_files.hpp
struct CandidateSources;

// library_policy.hpp
struct LibraryPolicy;

// compile/compile_options.hpp
class CompileDriverError;
struct CompileOptions;

// compile/toolchain.hpp
struct Toolchain;

// compile/compile_driver.hpp
struct SandboxRequirements;
// CompileDriver<S> is constrained by the Sandbox concept: include compile/compile_driver.hpp.

// compile/compile_tool.hpp
struct CompileToolOptions;

// tools/*.hpp (BashTool is a constrained template: include tools/bash.hpp to name it)
enum class PathResolution;
struct BashOptions;
struct ReadOptions;
struct WriteOptions;
struct EditOptions;
struct GrepOptions;
struct GlobOptions;
struct StandardToolOptions;
class ReadTool;
class WriteTool;
class EditTool;
class MultiEditTool;
class GrepTool;
class GlobTool;

// agent/context_window.hpp
enum class ContextRole;
struct ContextOptions;
struct CompactionOutcome;
class ContextWindow;

// agent/agent_result.hpp
enum class StopReason;
struct ScoredCandidate;
struct EpisodeResult;

// agent/agent_observer.hpp
struct EpisodeProgress;
class AgentObserver;
struct CallbackObserver;
class TerminalProgress;

// agent/budget.hpp
struct AgentBudget;
struct SpentBudget;

// agent/agent_loop.hpp
struct AgentOptions;

// agent/optimize.hpp
struct OptimizeOptions;
struct OptimizeResult;
// verify/harness_worker.hpp
class HarnessError;
struct HarnessWorkerOptions;
struct HarnessReply;
class HarnessWorker;

// verify/harness_verifier.hpp
struct VerificationPolicy;
struct HarnessOptions;
class HarnessVerifier;

// evaluate/staged_evaluator.hpp
struct PreparedCandidate;
class AnyStagedEvaluator;

// evaluate/trusted_evaluator.hpp
struct TrustedEvaluatorOptions;
// TrustedEvaluator<V, S> is constrained by concepts: include evaluate/trusted_evaluator.hpp.

// bench/table_metrics.hpp
struct BenchSample;
struct TableRow;

// service/evaluation_pool.hpp
enum class PoolStage;
enum class PoolOutcome;
struct PoolSlot;
struct EvaluationRequest;
struct PoolResult;
struct PoolEvent;
struct PoolCounters;
struct EvaluationPoolOptions;
struct WorkerRegistration;
struct WorkerGrant;
struct WorkerLease;
class UnknownWorker;
class PoolFull;
class EvaluationPool;

// service/worker_protocol.hpp, service/remote_worker.hpp
class CoordinatorRefusal;
struct RemoteWorkerOptions;
struct RemoteWorkerCounters;
// RemoteWorker<Link> is constrained by CoordinatorLink: include service/remote_worker.hpp.

// service/evaluation_service.hpp
class ServiceError;
struct ServiceClient;
struct EvaluationServiceOptions;
class EvaluationService;

// verify/verify_tool.hpp
struct VerifyToolOptions;

// torch/output_check.hpp (component torch)
struct OutputCheck;

}  // namespace cuda_agent

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

// tool.hpp
struct ToolResult;
class ToolContext;
class AnyTool;
class ToolRegistry;

// process.hpp
class Environment;
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

// trajectory.hpp
class TrajectoryWriter;

// verifier.hpp, profiler.hpp, reward_policy.hpp
class AnyVerifier;
class AnyProfiler;
class AnyRewardPolicy;

// evaluator.hpp
class AnyEvaluator;

// task_loader.hpp
class TaskLoadError;
struct ConstructorParameter;
struct ReferenceModule;

// candidate_files.hpp
struct CandidateSources;

// library_policy.hpp
struct LibraryPolicy;

// compile_driver.hpp
class CompileDriverError;
struct CompileOptions;
struct Toolchain;
struct SandboxRequirements;
// CompileDriver<S> is constrained by the Sandbox concept: include compile_driver.hpp.

// tools/compile_tool.hpp
struct CompileToolOptions;

}  // namespace cuda_agent

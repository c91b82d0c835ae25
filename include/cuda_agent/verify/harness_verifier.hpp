// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// `HarnessVerifier`: the shipped `Verifier` for PyTorch tasks. It decides whether a built
/// candidate computes the task's reference function, through the Python evaluation
/// harness running in two warm, sandboxed worker processes:
///
///   - the **reference worker** runs the task's `Model` on every input set and keeps the
///     expected outputs in its own memory. It never imports candidate code, and its sandbox
///     cannot read the candidate's files: only the raw bytes the candidate writes as output;
///   - the **candidate worker** runs `ModelNew` under the forward guard, as an unprivileged
///     user, with the candidate's files and the reference read-only and only an output
///     folder writable;
///   - the two children of one verification meet over a session (two FIFOs): the candidate
///     announces each output, the reference reads it as raw bytes and compares it.
///
/// Nothing the candidate's process reports is taken as proof of correctness: it can
/// only reject itself. The checks (see the harness's `candidate.py` and `reference.py`):
/// static scans of model_new.py and the C++ sources; the task's null-model audit (once per
/// task: stress inputs where a null model would pass its own inputs, and no score at all
/// for a task that cannot tell real implementations from null ones); strict
/// `load_state_dict` of the reference's weights, every floating parameter and buffer
/// perturbed; >= 5 input sets from seeds drawn for this verification, the last ones scaled
/// outside the default distribution, handed to the candidate one call at a time after it
/// was constructed, in a plan it cannot predict (how many calls each set gets, in which
/// order, at which addresses: see the harness's `plans.py`); outputs poisoned before every
/// call and at least two calls per set that must all match; exact `torch.Tensor` outputs
/// with the reference's structure, shape, dtype and device; per-dtype tolerances with atol
/// scaled to the output's magnitude; NaN/Inf where the reference is finite; inputs unchanged
/// unless the reference changes them; inside `forward` only the extension and tensor
/// creation, copy and metadata operators (a TorchDispatchMode sees what C++ calls too);
/// the extension's kernels must run; no thread, process or unjoined stream may outlive a
/// call; torch's functions and global settings must be left alone.

#include <chrono>        // milliseconds, steady_clock
#include <cstdint>       // uint32_t, uint64_t
#include <exception>     // exception_ptr, current_exception, rethrow_exception
#include <filesystem>    // path, copy_file, create_directories, remove_all, permissions
#include <functional>    // function
#include <iomanip>       // setprecision
#include <map>           // map
#include <memory>        // unique_ptr, make_unique
#include <mutex>         // mutex, lock_guard
#include <optional>      // optional
#include <random>        // random_device
#include <set>           // set
#include <sstream>       // ostringstream
#include <stdexcept>     // invalid_argument
#include <string>        // string, to_string
#include <string_view>   // string_view
#include <system_error>  // error_code, system_error
#include <thread>        // jthread
#include <utility>       // move, pair
#include <vector>        // vector

#include <unistd.h>  // geteuid, getpid, sysconf

#include <nlohmann/json.hpp>

#include "cuda_agent/candidate_files.hpp"
#include "cuda_agent/detail/files.hpp"
#include "cuda_agent/detail/harness_session.hpp"
#include "cuda_agent/detail/ownership.hpp"
#include "cuda_agent/detail/python_interpreter.hpp"
#include "cuda_agent/detail/sha256.hpp"
#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/evaluation_policy.hpp"
#include "cuda_agent/library_policy.hpp"
#include "cuda_agent/resources.hpp"
#include "cuda_agent/sandbox.hpp"
#include "cuda_agent/sandbox/bubblewrap_sandbox.hpp"
#include "cuda_agent/sandbox/sandbox_options.hpp"
#include "cuda_agent/task.hpp"
#include "cuda_agent/tolerance.hpp"
#include "cuda_agent/verifier.hpp"
#include "cuda_agent/verify/harness_worker.hpp"
#include "cuda_agent/verify/link_policy.hpp"

namespace cuda_agent {

/// What a verification demands.
struct VerificationPolicy {
  /// Input sets, each from its own seed (at least 5 are required for a verdict of correct).
  int input_sets = 5;
  /// Calls per input set at least; all must match (two runs catch reads of stale or
  /// uninitialised memory and races).
  int runs_per_set = 2;
  /// Up to this many further calls (at least one when positive), each on an input set drawn
  /// at random: the number of calls varies from set to set and from one verification to the
  /// next, and every call is checked.
  int extra_calls = 2;
  /// Factors for the floating-point inputs of the last input sets (one per set), so that a
  /// candidate cannot rely on the default input distribution (a clamp never reached).
  std::vector<double> stress_scales{2.0, 4.0};
  TolerancePolicy tolerance = TolerancePolicy::paper();
  /// "eval" (the CUDA Agent paper) or "train" (KernelBench's default module state).
  std::string model_mode = "eval";
  /// Perturb every floating parameter and persistent buffer of the reference, keeping its
  /// scale (the harness's `models.perturb_parameters`): defaults such as a BatchNorm's
  /// weight 1 and bias 0, or a gain initialized to ones, would let a kernel that ignores
  /// them pass.
  bool perturb_weights = true;
  /// Audit the task against null models (zeros, a constant, the mean, the input, the first
  /// set's outputs) before its first verification, once per task (`HarnessVerifier::audit`):
  /// the stress distributions it finds replace some of the task's own input sets, and a
  /// task that no distribution rescues is rejected as `task_unfit`, never scored.
  bool audit_task = true;
  /// The static checks of model_new.py and the C++/CUDA sources, before anything runs.
  bool static_checks = true;
  /// On CUDA, profile one call: the candidate's kernels must run, and no kernel on
  /// another stream may outlive the call.
  bool observe_device_activity = true;
  /// Run the reference twice on the first input set and refuse a task whose reference
  /// is not deterministic.
  bool check_reference_determinism = true;
  /// cuBLAS and cuDNN, as the compile driver allows them; by default derived per task
  /// from the operators the reference runs (see `HarnessVerifier::library_policy`).
  LibraryPolicy libraries;
  /// Check every symbol the built extension links against the contract's allowlist
  /// (verify/link_policy.hpp) before any of its code runs. Independent of
  /// `static_checks`: it judges the compiled module, not the sources.
  bool check_linked_symbols = true;
  /// aten operators ("cat", "aten.cat") allowed inside forward on top of the creation,
  /// copy and metadata operators.
  std::vector<std::string> extra_allowed_operations;
  /// Fixed seeds (to reproduce a verification); empty: drawn from the system's entropy.
  std::vector<std::uint32_t> seeds;
  std::optional<std::uint32_t> init_seed;
  /// The seed of the verification plan (calls per set, order, placement of the inputs),
  /// which only the reference process sees; empty: drawn from the system's entropy.
  std::optional<std::uint64_t> plan_seed;
  /// The whole verification (both processes), from start to verdict.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

/// Builds the sandbox of a harness worker. The default is bubblewrap, and never a
/// silent fallback to running unconfined.
using HarnessSandboxFactory = std::function<AnySandbox(SandboxOptions)>;

/// How the harness runs on this host.
struct HarnessOptions {
  /// "cuda" or "cpu".
  std::string device = "cuda";
  /// The Python interpreter with torch. Empty: `$CUDA_AGENT_PYTHON`, else python3 on PATH.
  std::filesystem::path python;
  /// Where the harness, references, candidates and sessions live. It must be reachable by
  /// the sandbox users. Empty: a fresh directory under the system's temporary directory,
  /// removed with the verifier.
  std::filesystem::path work_directory;
  HarnessSandboxFactory sandbox_factory = [](SandboxOptions options) {
    return make_default_sandbox(std::move(options));
  };
  /// The base of every worker's sandbox options (limits, environment, hidden paths); the
  /// verifier sets the workspace, mounts, GPUs and identity of each worker on top.
  SandboxOptions sandbox;
  /// Device minors (/dev/nvidiaN) the workers may use for device "cuda".
  std::vector<int> gpus{0};
  /// The identities of the two workers when running as root: different users, so that
  /// the candidate cannot signal the reference and process limits count separately.
  UserIdentity reference_identity{65533, 65534};
  UserIdentity candidate_identity{65534, 65534};
  std::chrono::milliseconds startup_timeout{std::chrono::minutes(5)};
  /// See `HarnessWorkerOptions::prepared_child`.
  bool prepared_children = true;
  /// Where task audits are kept between verifiers (one JSON file per task, harness version
  /// and verification policy; the directory must be the host's alone). Empty: each verifier
  /// keeps its audits in memory only.
  std::filesystem::path audit_cache_directory;
  /// Short progress lines ("starting the harness workers", ...).
  std::function<void(std::string_view)> progress;
};

namespace detail {

inline std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

inline std::string capped(std::string text, std::size_t limit) {
  if (text.size() > limit) text = text.substr(0, limit) + " [...]";
  return text;
}

/// Makes a tree readable and traversable by everyone and writable by no one.
inline void seal_tree(const std::filesystem::path& root) {
  using std::filesystem::perms;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root))
    std::filesystem::permissions(entry.path(), entry.is_directory()
                                                   ? perms::owner_read | perms::owner_exec | perms::group_read |
                                                         perms::group_exec | perms::others_read | perms::others_exec
                                                   : perms::owner_read | perms::group_read | perms::others_read);
  std::filesystem::permissions(root, perms::owner_read | perms::owner_exec | perms::group_read | perms::group_exec |
                                         perms::others_read | perms::others_exec);
}

inline void give_to(const std::filesystem::path& path, const UserIdentity& identity) {
  if (!running_as_root()) return;
  try {
    give_path_to(path, identity);
  } catch (const std::system_error& error) {
    throw HarnessError("cannot give " + path.string() + " to uid " + std::to_string(identity.uid) + ": " +
                       error.code().message());
  }
}

/// How much of the device the evaluation itself took, from the reference's footprint: what
/// the reference's process held while the candidate ran, and what the harness places in the
/// candidate's process (one input set as generated and two placed, the outputs of this call
/// and of the one before). Empty where the footprint does not tell.
struct EvaluatorShare {
  std::uint64_t bytes = 0;
  std::uint64_t device_bytes = 0;
};

inline std::optional<EvaluatorShare> evaluator_share(const nlohmann::json& footprint) {
  if (!footprint.is_object()) return std::nullopt;
  auto number = [&](const char* key) {
    const auto value = footprint.find(key);
    return value != footprint.end() && value->is_number_unsigned() ? value->get<std::uint64_t>() : std::uint64_t{0};
  };
  const std::uint64_t device = number("device_total_bytes");
  if (device == 0) return std::nullopt;
  return EvaluatorShare{number("held_device_bytes") + 3 * number("input_bytes") + 2 * number("output_bytes"), device};
}

inline std::string gibibytes(std::uint64_t bytes) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / static_cast<double>(1ULL << 30) << " GiB";
  return text.str();
}

/// The harness's error in place of a candidate's out-of-memory failure where the
/// evaluation itself took at least half of the device (the reference's expected outputs,
/// the inputs and outputs the harness placed): a candidate that fails there may be right
/// on a larger device, so it is not rejected; the pool then tries it elsewhere. Only the
/// reference's report decides, never the candidate's.
[[nodiscard]] inline std::optional<std::string> evaluator_out_of_memory(RejectionReason reason,
                                                                        const std::string& message,
                                                                        const nlohmann::json& footprint) {
  if (!is_out_of_device_memory(Rejection{reason, message, {}})) return std::nullopt;
  const auto share = evaluator_share(footprint);
  if (!share || share->bytes * 2 < share->device_bytes) return std::nullopt;
  return "the device ran out of memory in the candidate's process while the evaluation itself took " +
         gibibytes(share->bytes) + " of its " + gibibytes(share->device_bytes) +
         " (the reference's expected outputs, the inputs and outputs placed for the candidate): this task needs a"
         " device with more memory, and the candidate was not judged";
}
}  // namespace detail

/// The `Verifier` of PyTorch tasks. Workers start on first use (or with `start()`) and
/// stay warm; `verify` may be called repeatedly, from one thread at a time (calls are
/// serialised).
class HarnessVerifier {
 public:
  explicit HarnessVerifier(HarnessOptions options, VerificationPolicy policy = {})
      : options_(std::move(options)), policy_(std::move(policy)) {
    if (options_.device != "cuda" && options_.device != "cpu")
      throw std::invalid_argument("HarnessVerifier: unknown device '" + options_.device + "'; use \"cuda\" or \"cpu\"");
    if (policy_.input_sets < 1 || policy_.runs_per_set < 1 || policy_.extra_calls < 0)
      throw std::invalid_argument(
          "HarnessVerifier: input_sets and runs_per_set must be positive, extra_calls not negative");
    if (!options_.sandbox_factory) throw std::invalid_argument("HarnessVerifier: no sandbox factory");
    const auto python = detail::locate_python(options_.python);
    if (!python)
      throw HarnessError("no Python interpreter '" + detail::configured_python(options_.python).string() + "' in PATH");
    options_.python = *python;
    if (options_.work_directory.empty()) {
      options_.work_directory = std::filesystem::temp_directory_path() /
                                ("cuda-agent-harness-" + std::to_string(::getpid()) + "-" + detail::random_hex(6));
      owns_work_directory_ = true;
    }
    options_.work_directory = std::filesystem::absolute(options_.work_directory).lexically_normal();
  }

  HarnessVerifier(HarnessVerifier&&) noexcept = default;
  HarnessVerifier& operator=(HarnessVerifier&&) noexcept = default;
  ~HarnessVerifier() {
    if (!state_) return;
    state_->reference.reset();
    state_->candidate.reset();
    if (owns_work_directory_) {
      std::error_code ignored;
      unseal(options_.work_directory);
      std::filesystem::remove_all(options_.work_directory, ignored);
    }
  }

  [[nodiscard]] const HarnessOptions& options() const noexcept { return options_; }
  [[nodiscard]] const VerificationPolicy& policy() const noexcept { return policy_; }
  [[nodiscard]] VerificationPolicy& policy() noexcept { return policy_; }

  /// Prepares the work directory and starts both workers now (they start on first use
  /// otherwise). Throws HarnessError or SandboxError when they cannot start.
  void start() {
    prepare();
    const std::lock_guard lock(state_->mutex);
    start_workers();
  }

  /// The two workers, for handlers other than the verifier's (the profiler's timing).
  [[nodiscard]] HarnessWorker& reference_worker() {
    start();
    return *state_->reference;
  }
  [[nodiscard]] HarnessWorker& candidate_worker() {
    start();
    return *state_->candidate;
  }

  /// The static checks alone, on the candidate's sources (model_new.py and kernels/):
  /// the first finding as a rejection, or nothing. All findings go to `findings`.
  [[nodiscard]] std::optional<Rejection> scan(const Task& task, const std::map<std::string, std::string>& files,
                                              nlohmann::json* findings = nullptr) {
    prepare();
    const std::lock_guard lock(state_->mutex);
    start_workers();
    return run_scan(task, files, findings, task_libraries(task, policy_.libraries));
  }

  /// What a trusted evaluation runs before building: the static checks, when the policy
  /// has them on (nothing otherwise); under a request's `policy`, with its library policy.
  [[nodiscard]] std::optional<Rejection> prescreen(const Task& task, const std::map<std::string, std::string>& files,
                                                   const EvaluationPolicy& policy = {}) {
    const VerificationPolicy chosen = policy_for(policy);
    if (!chosen.static_checks) return std::nullopt;
    prepare();
    const std::lock_guard lock(state_->mutex);
    start_workers();
    return run_scan(task, files, nullptr, task_libraries(task, chosen.libraries));
  }

  /// This verifier's policy with a request's choices in place of its own: the tolerance
  /// profile and the library policy `policy` names. Throws std::invalid_argument for a
  /// tolerance profile it does not know.
  [[nodiscard]] VerificationPolicy policy_for(const EvaluationPolicy& policy) const {
    VerificationPolicy chosen = policy_;
    if (policy.tolerance) {
      const std::optional<TolerancePolicy> tolerance = tolerance_profile(*policy.tolerance);
      if (!tolerance) throw std::invalid_argument("no tolerance profile is named '" + *policy.tolerance + "'");
      chosen.tolerance = *tolerance;
    }
    if (policy.libraries) chosen.libraries = *policy.libraries;
    return chosen;
  }

  /// Whether the task tells real implementations from null ones (zeros, a constant, the
  /// mean, the input, the first set's outputs), and which stress distributions it needs for
  /// that: the audit handler's report ("degenerate": a null model passes the task's own
  /// inputs; "stress": the distributions that make every null model fail; "unfit": none
  /// does, with "message"; "kept_state": the tensors the reference replaces in its own
  /// attributes from call to call, which ModelNew may keep too). Computed once per task, harness version and policy,
  /// then taken from the cache (in memory, and in `HarnessOptions::audit_cache_directory` when set); "cached" says
  /// which.
  [[nodiscard]] nlohmann::json audit(const Task& task) {
    prepare();
    const std::lock_guard lock(state_->mutex);
    start_workers();
    return audit_of(task, policy_);
  }

  /// The gains the task's latest audit (under the tolerance of its latest verification)
  /// gave weights too small for the tolerance to see, when the task has been audited (an
  /// empty object otherwise): a timing session of the task applies them too, so that its
  /// output checks see the model the verification saw.
  [[nodiscard]] nlohmann::json known_weight_gains(const Task& task) const {
    const std::lock_guard lock(state_->mutex);
    const auto latest = state_->latest_audit.find(task.content_hash());
    if (latest == state_->latest_audit.end()) return nlohmann::json::object();
    const auto found = state_->audits.find(latest->second);
    if (found == state_->audits.end()) return nlohmann::json::object();
    return found->second.value("weight_gains", nlohmann::json::object());
  }

  /// The library policy of `task`: the policy's own when it is fixed, else cuBLAS where
  /// the reference multiplies matrices or convolves and cuDNN where it convolves, within
  /// what the policy allows. The reference worker records the operators the reference
  /// runs (the harness's `library_policy` handler), once per task. Under a request's
  /// `policy`, its library policy stands for the verifier's own.
  [[nodiscard]] LibraryPolicy library_policy(const Task& task, const EvaluationPolicy& policy = {}) {
    const VerificationPolicy chosen = policy_for(policy);
    prepare();
    const std::lock_guard lock(state_->mutex);
    start_workers();
    return task_libraries(task, chosen.libraries);
  }

  /// Decides whether `candidate` (built: its build directory holds the extension)
  /// computes `task`'s reference function; under a request's `policy`, with its tolerance
  /// profile and library policy.
  [[nodiscard]] VerificationResult verify(const Task& task, const Candidate& candidate,
                                          const EvaluationPolicy& policy = {}) {
    const auto started = std::chrono::steady_clock::now();
    const VerificationPolicy chosen = policy_for(policy);
    prepare();
    const std::lock_guard lock(state_->mutex);
    VerificationResult result = run_verification(task, candidate, chosen);
    result.duration = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    return result;
  }

 private:
  struct State {
    std::mutex mutex;
    bool prepared = false;
    std::unique_ptr<HarnessWorker> reference;
    std::unique_ptr<HarnessWorker> candidate;
    std::set<std::string> references_written;
    std::map<std::string, nlohmann::json> audits;
    /// What each task's reference needs of the libraries (by content hash): the harness's
    /// `library_policy` handler's answer, which each policy resolves in its own way.
    std::map<std::string, nlohmann::json> task_needs;
    /// The key of each task's latest audit (by content hash), whose weight gains a timing
    /// session of the task applies.
    std::map<std::string, std::string> latest_audit;
  };

  void report(std::string_view line) const {
    if (options_.progress) options_.progress(line);
  }

  std::filesystem::path path(std::string_view name) const { return options_.work_directory / std::string(name); }

  static void unseal(const std::filesystem::path& root) {
    std::error_code ignored;
    using std::filesystem::perms;
    if (!std::filesystem::exists(root, ignored)) return;
    std::filesystem::permissions(root, perms::owner_all, std::filesystem::perm_options::add, ignored);
    for (auto it = std::filesystem::recursive_directory_iterator(root, ignored);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ignored))
      if (it->is_directory(ignored))
        std::filesystem::permissions(it->path(), perms::owner_all, std::filesystem::perm_options::add, ignored);
  }

  void prepare() {
    if (!state_) state_ = std::make_unique<State>();
    const std::lock_guard lock(state_->mutex);
    if (state_->prepared) return;
    detail::make_open_directory(options_.work_directory);
    // The harness: written fresh from the copy inside the library, then made read-only.
    const std::filesystem::path harness = path("harness");
    unseal(harness);
    std::error_code ignored;
    std::filesystem::remove_all(harness, ignored);
    if (write_embedded_resources("harness/", harness).empty())
      throw HarnessError("this build of cuda-agent carries no evaluation harness (resources/harness is missing)");
    detail::seal_tree(harness);
    for (std::string_view name : {"references", "candidates", "sessions", "channels", "scratch", "rendezvous"})
      detail::make_open_directory(path(name));
    using std::filesystem::perms;
    // The channels are the host's: workers may pass through, but list and change nothing.
    std::filesystem::permissions(path("channels"), perms::owner_all | perms::group_exec | perms::others_exec);
    for (std::string_view role : {"reference", "candidate"}) {
      detail::make_open_directory(path("channels") / std::string(role));
      std::filesystem::permissions(path("channels") / std::string(role),
                                   perms::owner_all | perms::group_exec | perms::others_exec);
      detail::make_open_directory(path("scratch") / std::string(role));
    }
    detail::give_to(path("scratch") / "reference", options_.reference_identity);
    // Where the reference side of a timing session listens for the candidate side, to hand
    // it the memory of the trusted batches: only the reference's user creates anything there.
    detail::give_to(path("rendezvous"), options_.reference_identity);
    detail::give_to(path("scratch") / "candidate", options_.candidate_identity);
    state_->prepared = true;
  }

  SandboxOptions worker_sandbox(const std::string& role) const {
    SandboxOptions sandbox = options_.sandbox;
    const bool reference = role == "reference";
    sandbox.workspace = reference ? path("scratch") / "reference" : path("sessions");
    auto mount = [&](const std::filesystem::path& where, Mount::Access access) {
      sandbox.mounts.push_back(Mount{where, where, access, false});
    };
    mount(path("harness"), Mount::Access::read_only);
    mount(path("references"), Mount::Access::read_only);
    mount(path("channels") / role, Mount::Access::read_only);
    mount(path("rendezvous"), reference ? Mount::Access::read_write : Mount::Access::read_only);
    if (reference) {
      mount(path("sessions"), Mount::Access::read_only);
      sandbox.hidden_paths.push_back(path("candidates"));
      sandbox.hidden_paths.push_back(path("channels") / "candidate");
    } else {
      mount(path("candidates"), Mount::Access::read_only);
      sandbox.hidden_paths.push_back(path("channels") / "reference");
      sandbox.hidden_paths.push_back(path("scratch") / "reference");
    }
    if (options_.device == "cuda") sandbox.gpus = options_.gpus;
    if (::geteuid() == 0) {
      const auto& identity = reference ? options_.reference_identity : options_.candidate_identity;
      sandbox.uid = identity.uid;
      sandbox.gid = identity.gid;
    }
    // Outputs of large tasks pass through files and page cache: the defaults for build
    // commands are too small for them.
    const std::uint64_t memory = detail::physical_memory_bytes();
    if (!options_.sandbox.default_limits.memory_bytes || *options_.sandbox.default_limits.memory_bytes < memory / 2)
      sandbox.default_limits.memory_bytes = std::max<std::uint64_t>(memory / 4 * 3, std::uint64_t{8} << 30);
    sandbox.default_limits.file_size_bytes = std::uint64_t{1} << 40;
    sandbox.default_limits.processes = 4096;
    sandbox.environment.set("PYTHONDONTWRITEBYTECODE", "1");
    // The worker's uid may have no passwd entry; Python's getpass (which torch calls)
    // then takes the name from here instead of failing.
    sandbox.environment.set("USER", "cuda-agent-" + role).set("LOGNAME", "cuda-agent-" + role);
    return sandbox;
  }

  /// Starts the workers that are not running, at the same time: each spends seconds
  /// importing torch, and one after the other they took twice as long.
  void start_workers() {
    std::vector<HarnessWorker*> starting;
    for (const std::string role : {"reference", "candidate"}) {
      std::unique_ptr<HarnessWorker>& worker = role == "reference" ? state_->reference : state_->candidate;
      if (worker && worker->running()) continue;
      if (!worker) {
        HarnessWorkerOptions worker_options;
        worker_options.role = role;
        worker_options.device = options_.device;
        worker_options.python = options_.python;
        worker_options.harness_directory = path("harness");
        worker_options.channel_directory = path("channels") / role;
        if (::geteuid() == 0)
          worker_options.owner = role == "reference" ? options_.reference_identity : options_.candidate_identity;
        worker_options.startup_timeout = options_.startup_timeout;
        worker_options.prepared_child = options_.prepared_children;
        // Inside bubblewrap these are the sandbox's private folders: cleaned after each request.
        worker_options.scrub_directories = {"/tmp", "/dev/shm"};
        worker =
            std::make_unique<HarnessWorker>(options_.sandbox_factory(worker_sandbox(role)), std::move(worker_options));
      }
      report("starting the " + role + " harness worker (imports torch once)");
      starting.push_back(worker.get());
    }
    std::vector<std::exception_ptr> failures(starting.size());
    {
      std::vector<std::jthread> threads;
      for (std::size_t i = 0; i < starting.size(); ++i)
        threads.emplace_back([&, i] {
          try {
            starting[i]->start();
          } catch (...) {
            failures[i] = std::current_exception();
          }
        });
    }
    for (const std::exception_ptr& failure : failures)
      if (failure) std::rethrow_exception(failure);
  }

  std::pair<std::vector<std::uint32_t>, std::uint32_t> draw_seeds(const VerificationPolicy& policy,
                                                                  int count = 0) const {
    const int wanted = count > 0 ? count : policy.input_sets;
    std::random_device entropy;
    std::vector<std::uint32_t> seeds = policy.seeds;
    std::set<std::uint32_t> seen(seeds.begin(), seeds.end());
    while (static_cast<int>(seeds.size()) < wanted) {
      const std::uint32_t seed = entropy();
      if (seen.insert(seed).second) seeds.push_back(seed);
    }
    seeds.resize(static_cast<std::size_t>(wanted));
    return {seeds, policy.init_seed.value_or(entropy())};
  }

  /// The input sets of a verification: (scale, distribution) each. The task's own sets of
  /// `scales()`, with the audit's stress distributions in the unscaled places after the
  /// first (the first stays the task's own, which the reference's determinism check
  /// uses), and in further sets where those places run out.
  std::pair<std::vector<double>, nlohmann::json> input_sets(const nlohmann::json& stress,
                                                            const VerificationPolicy& policy) const {
    std::vector<double> set_scales = scales(policy.input_sets, policy);
    nlohmann::json distributions = nlohmann::json::array();
    for (std::size_t i = 0; i < set_scales.size(); ++i) distributions.push_back(nullptr);
    std::size_t next = 0;
    for (std::size_t i = 1; i < set_scales.size() && next < stress.size(); ++i)
      if (set_scales[i] == 1.0) distributions[i] = stress[next++];
    for (; next < stress.size(); ++next) {
      set_scales.push_back(1.0);
      distributions.push_back(stress[next]);
    }
    return {set_scales, distributions};
  }

  /// A digest of the harness this library carries: a cached audit is valid for one version.
  static std::string harness_digest() {
    static const std::string digest = [] {
      detail::Sha256 hash;
      for (const std::string_view path : embedded_resources_under("harness/")) {
        hash.update(path).update("\n");
        if (const auto content = embedded_resource(path)) hash.update(*content).update("\n");
      }
      return hash.hex_digest();
    }();
    return digest;
  }

  /// What an audit's result depends on besides the task: the harness and the policy.
  std::string audit_key(const Task& task, const VerificationPolicy& policy) const {
    const nlohmann::json key = {{"task", task.content_hash()},
                                {"harness", harness_digest()},
                                {"device", options_.device},
                                {"tolerance", policy.tolerance},
                                {"mode", policy.model_mode},
                                {"perturb_weights", policy.perturb_weights},
                                {"scales", scales(policy.input_sets, policy)}};
    return detail::Sha256{}.update("cuda-agent audit v1\n").update(key.dump()).hex_digest();
  }

  /// The task's audit, from the caches or run now (and stored in them).
  nlohmann::json audit_of(const Task& task, const VerificationPolicy& policy) {
    const std::string key = audit_key(task, policy);
    state_->latest_audit[task.content_hash()] = key;
    if (const auto found = state_->audits.find(key); found != state_->audits.end()) {
      nlohmann::json cached = found->second;
      cached["cached"] = true;
      return cached;
    }
    const std::filesystem::path file = options_.audit_cache_directory.empty()
                                           ? std::filesystem::path()
                                           : options_.audit_cache_directory / (key + ".json");
    if (!file.empty()) {
      std::error_code error;
      if (std::filesystem::exists(file, error)) {
        try {
          nlohmann::json stored = nlohmann::json::parse(detail::read_file(file));
          if (stored.is_object() && stored.value("key", std::string()) == key && stored.contains("audit")) {
            state_->audits[key] = stored["audit"];
            stored["audit"]["cached"] = true;
            return stored["audit"];
          }
        } catch (const std::exception&) {
          // A file that does not parse counts as a miss and is written again below.
        }
      }
    }
    const auto [seeds, init_seed] = draw_seeds(policy);
    nlohmann::json arguments = common_arguments(task, init_seed, policy);
    arguments["seeds"] = seeds;
    arguments["scales"] = scales(static_cast<int>(seeds.size()), policy);
    arguments["tolerance"] = policy.tolerance;
    const HarnessReply reply = state_->reference->call("audit", arguments, policy.timeout);
    if (!reply.has_result())
      throw HarnessError("the audit of " + task.name + " failed: " + reply.error_text() + " " + reply.output());
    nlohmann::json result = reply.result();
    state_->audits[key] = result;
    if (!file.empty()) {
      std::filesystem::create_directories(file.parent_path());
      detail::write_file_atomically(
          file, nlohmann::json{{"key", key}, {"task", task.name}, {"audit", result}}.dump(1) + "\n");
    }
    result["cached"] = false;
    return result;
  }

  std::vector<double> scales(int sets, const VerificationPolicy& policy) const {
    std::vector<double> result(static_cast<std::size_t>(sets), 1.0);
    const std::size_t stressed =
        std::min(policy.stress_scales.size(), static_cast<std::size_t>(sets > 1 ? sets - 1 : 0));
    for (std::size_t i = 0; i < stressed; ++i)
      result[result.size() - stressed + i] = policy.stress_scales[policy.stress_scales.size() - stressed + i];
    return result;
  }

  std::filesystem::path write_reference(const Task& task) {
    const std::string hash = task.content_hash();
    const std::filesystem::path directory = path("references") / hash;
    std::filesystem::path file = directory / "model.py";
    if (!state_->references_written.count(hash) || !std::filesystem::exists(file)) {
      detail::make_open_directory(directory);
      detail::write_file_atomically(file, task.reference_source);
      state_->references_written.insert(hash);
    }
    return file;
  }

  nlohmann::json common_arguments(const Task& task, std::uint32_t init_seed, const VerificationPolicy& policy) {
    return {{"reference_path", write_reference(task).string()},
            {"device", options_.device},
            {"init_seed", init_seed},
            {"mode", policy.model_mode},
            {"perturb_weights", policy.perturb_weights}};
  }

  /// `library_policy` under `libraries`, with the state's lock held and the workers started.
  LibraryPolicy task_libraries(const Task& task, const LibraryPolicy& libraries) {
    if (!libraries.derive_from_reference) return libraries;
    const std::string hash = task.content_hash();
    auto known = state_->task_needs.find(hash);
    if (known == state_->task_needs.end()) {
      const nlohmann::json arguments = {{"reference_path", write_reference(task).string()},
                                        {"device", options_.device}};
      const HarnessReply reply = state_->reference->call("library_policy", arguments, std::chrono::minutes(2));
      if (!reply.has_result())
        throw HarnessError("the library policy of " + task.name + " could not be derived: " + reply.error_text() + " " +
                           reply.output());
      known = state_->task_needs.emplace(hash, reply.result()).first;
    }
    return libraries.for_task(known->second.value("cublas", false), known->second.value("cudnn", false));
  }

  std::optional<Rejection> run_scan(const Task& task, const std::map<std::string, std::string>& files,
                                    nlohmann::json* findings, const LibraryPolicy& libraries) {
    nlohmann::json text_files = nlohmann::json::object();
    for (const auto& [name, content] : files) text_files[name] = content;
    const nlohmann::json arguments = {
        {"files", text_files},
        {"reference_source", task.reference_source},
        {"policy", {{"allow_cublas", libraries.cublas}, {"allow_cudnn", libraries.cudnn}}}};
    const HarnessReply reply = state_->reference->call("scan", arguments, std::chrono::minutes(1));
    if (!reply.has_result())
      throw HarnessError("the static checks failed to run: " + reply.error_text() + " " + reply.output());
    const nlohmann::json& found = reply.result().at("findings");
    if (findings) *findings = found;
    if (found.empty()) return std::nullopt;
    const nlohmann::json& first = found.front();
    Rejection rejection;
    rejection.reason = parse_rejection_reason(first.value("reason", "")).value_or(RejectionReason::forbidden_construct);
    rejection.message = first.value("message", std::string("the static checks rejected the candidate"));
    if (found.size() > 1) rejection.message += " (" + std::to_string(found.size() - 1) + " more findings in details)";
    rejection.details = {{"stage", "static_checks"}, {"findings", found}};
    return rejection;
  }

  static std::optional<std::filesystem::path> find_module(const std::filesystem::path& build_directory) {
    std::error_code error;
    std::optional<std::filesystem::path> found;
    for (const auto& entry : std::filesystem::directory_iterator(build_directory, error)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(std::string(candidate_extension_name) + ".", 0) == 0 && name.size() > 3 &&
          name.substr(name.size() - 3) == ".so")
        found = entry.path();
    }
    return found;
  }

  static VerificationResult rejected(RejectionReason reason, std::string message,
                                     nlohmann::json details = nlohmann::json::object()) {
    VerificationResult result;
    result.correct = false;
    result.rejection = Rejection{reason, std::move(message), std::move(details)};
    return result;
  }

  VerificationResult run_verification(const Task& task, const Candidate& candidate, const VerificationPolicy& policy) {
    // Where a verification's time goes on this side, for whoever measures one.
    nlohmann::json host_timings = nlohmann::json::object();
    auto phase_end = [&, mark = std::chrono::steady_clock::now()](const char* name) mutable {
      const auto now = std::chrono::steady_clock::now();
      host_timings[name] = std::chrono::duration<double, std::milli>(now - mark).count();
      mark = now;
    };
    std::map<std::string, std::string> files;
    try {
      files = read_candidate_sources(candidate.source_directory).files;
    } catch (const std::exception& error) {
      return rejected(RejectionReason::load_error,
                      std::string("the candidate's files could not be read: ") + error.what());
    }
    start_workers();
    phase_end("read_sources_ms");
    if (policy.static_checks) {
      report("static checks");
      if (auto rejection = run_scan(task, files, nullptr, task_libraries(task, policy.libraries))) {
        VerificationResult result;
        result.rejection = std::move(rejection);
        return result;
      }
      phase_end("static_checks_ms");
    }
    const auto module = candidate.build_directory.empty() ? std::nullopt : find_module(candidate.build_directory);
    if (!module)
      return rejected(
          RejectionReason::load_error,
          "no built cuda_extension module in " + candidate.build_directory.string() + "; compile the candidate first");
    if (!files.count(std::string(candidate_model_file)))
      return rejected(RejectionReason::interface_mismatch, "the candidate has no model_new.py");
    if (policy.check_linked_symbols) {
      // What the module links, judged before any of its code runs.
      report("link check");
      const LibraryPolicy libraries = task_libraries(task, policy.libraries);
      LinkCheckResult linked;
      try {
        linked = check_module_symbols(*module, libraries);
      } catch (const std::exception& error) {
        return rejected(RejectionReason::load_error,
                        std::string("the built module cannot be read as a shared object: ") + error.what());
      }
      phase_end("link_check_ms");
      host_timings["link_check_symbols_ms"] = static_cast<double>(linked.duration.count()) / 1000.0;
      if (auto rejection = link_rejection(linked)) {
        rejection->details["library_policy"] = libraries;
        VerificationResult result;
        result.rejection = std::move(rejection);
        result.details["host_timings_ms"] = host_timings;
        return result;
      }
    }

    // The task's audit (run once per task, then cached): the stress inputs it needs, or no
    // verdict at all for a task that cannot tell a real implementation from a null one.
    nlohmann::json stress = nlohmann::json::array();
    nlohmann::json kept_state = nlohmann::json::object();
    nlohmann::json weight_gains = nlohmann::json::object();
    nlohmann::json audit_summary = nullptr;
    if (policy.audit_task) {
      report("auditing the task against null models (once per task)");
      const nlohmann::json audit = audit_of(task, policy);
      phase_end("audit_ms");
      audit_summary = {{"degenerate", audit.value("degenerate", false)},
                       {"passing", audit.value("passing", nlohmann::json::array())},
                       {"stress", audit.value("stress", nlohmann::json::array())},
                       {"unfit", audit.value("unfit", false)},
                       {"kept_state", audit.value("kept_state", nlohmann::json::object())},
                       {"weight_gains", audit.value("weight_gains", nlohmann::json::object())},
                       {"cached", audit.value("cached", false)}};
      if (audit.value("unfit", false))
        return rejected(RejectionReason::task_unfit,
                        "The task is unfit to be scored, whatever the candidate: " +
                            audit.value("message", std::string("a null model passes every input distribution")) +
                            " This is no verdict on the candidate.",
                        {{"stage", "task_audit"}, {"audit", audit}});
      stress = audit.value("stress", nlohmann::json::array());
      kept_state = audit.value("kept_state", nlohmann::json::object());
      weight_gains = audit.value("weight_gains", nlohmann::json::object());
    }

    // The session: a pristine copy of what runs, the channel, and the output folder.
    const detail::HarnessSessionFiles session(options_.work_directory, detail::random_hex(8),
                                              files.at(std::string(candidate_model_file)), *module,
                                              options_.candidate_identity);

    const auto [set_scales, distributions] = input_sets(stress, policy);
    const auto [seeds, init_seed] = draw_seeds(policy, static_cast<int>(set_scales.size()));
    nlohmann::json common = common_arguments(task, init_seed, policy);
    common["session_directory"] = session.directory().string();
    common["output_directory"] = session.output().string();
    // Weights too small for the tolerance to see are enlarged alike on both sides.
    common["weight_gains"] = weight_gains;
    nlohmann::json reference_arguments = common;
    reference_arguments["seeds"] = seeds;
    reference_arguments["scales"] = set_scales;
    reference_arguments["distributions"] = distributions;
    reference_arguments["runs"] = policy.runs_per_set;
    reference_arguments["extra_calls"] = policy.extra_calls;
    reference_arguments["plan_seed"] =
        policy.plan_seed.value_or((std::uint64_t{std::random_device{}()} << 32) | std::random_device{}());
    reference_arguments["observe_last_call"] = policy.observe_device_activity;
    reference_arguments["tolerance"] = policy.tolerance;
    reference_arguments["check_reference_determinism"] = policy.check_reference_determinism;
    nlohmann::json candidate_arguments = common;
    candidate_arguments["candidate_directory"] = session.copy().string();
    candidate_arguments["policy"] = {{"extra_allowed_operations", policy.extra_allowed_operations},
                                     {"observe_device_activity", policy.observe_device_activity},
                                     {"kept_state", kept_state}};

    phase_end("session_setup_ms");
    report("running the reference and the candidate");
    const auto deadline = std::chrono::steady_clock::now() + policy.timeout;
    const std::string reference_id =
        state_->reference->submit("reference", reference_arguments, policy.timeout + std::chrono::seconds(30));
    std::string candidate_id;
    try {
      candidate_id = state_->candidate->submit("candidate", candidate_arguments, policy.timeout);
    } catch (const HarnessError&) {
      state_->reference->cancel(reference_id);
      (void)state_->reference->wait(reference_id, deadline + std::chrono::seconds(60));
      throw;
    }
    HarnessReply candidate_reply;
    try {
      candidate_reply = state_->candidate->wait(candidate_id, deadline + std::chrono::seconds(30));
    } catch (const HarnessError&) {
      state_->reference->cancel(reference_id);
      (void)state_->reference->wait(reference_id, deadline + std::chrono::seconds(60));
      throw;
    }
    // The candidate's end closes its side of the session; the reference finishes promptly.
    // If the candidate never opened the session, the reference waits for it: cancel it.
    const auto patience = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    HarnessReply reference_reply;
    try {
      reference_reply = state_->reference->wait(reference_id, patience);
    } catch (const HarnessError& error) {
      throw HarnessError(std::string("the reference process did not finish after the candidate ended (") +
                         error.what() + "); the harness was restarted");
    }
    phase_end("processes_ms");
    // Each worker's time from taking the request to the child's report, and to its exit.
    for (const auto& [role, reply] :
         {std::pair{"reference", &reference_reply}, std::pair{"candidate", &candidate_reply}})
      host_timings[std::string(role) + "_worker_ms"] = {
          {"reported", reply->message.value("reported_ms", nlohmann::json())},
          {"done", reply->message.value("duration_ms", nlohmann::json())}};
    VerificationResult result = combine(candidate_reply, reference_reply, policy);
    result.details["host_timings_ms"] = std::move(host_timings);
    result.details["seeds"] = seeds;
    result.details["init_seed"] = init_seed;
    result.details["scales"] = reference_arguments["scales"];
    result.details["distributions"] = distributions;
    result.details["audit"] = audit_summary;
    result.details["plan_seed"] = reference_arguments["plan_seed"];
    result.details["tolerance"] = policy.tolerance;
    result.details["device"] = options_.device;
    // Where the workers' start-up went (interpreter, torch import, warm-up), for whoever
    // measures a cold verification.
    auto startup = [](const HarnessWorker& worker) {
      const nlohmann::json& ready = worker.ready_message();
      return ready.is_object() ? ready.value("startup", nlohmann::json()) : nlohmann::json();
    };
    result.details["worker_startup"] = {{"reference", startup(*state_->reference)},
                                        {"candidate", startup(*state_->candidate)}};
    return result;
  }

  /// The verdict from what both sides reported. Only the reference side and the
  /// worker's own observations can make a candidate correct.
  VerificationResult combine(const HarnessReply& candidate, const HarnessReply& reference,
                             const VerificationPolicy& policy) const {
    VerificationResult result;
    nlohmann::json& details = result.details;
    details["candidate_output"] = detail::capped(candidate.output(), 8000);
    const nlohmann::json candidate_report =
        candidate.has_result() && candidate.result().is_object() ? candidate.result() : nlohmann::json::object();
    if (candidate_report.contains("observations")) details["observations"] = candidate_report["observations"];
    if (candidate_report.contains("timings_ms")) details["candidate_timings_ms"] = candidate_report["timings_ms"];
    if (!reference.has_result()) {
      result.rejection = Rejection{RejectionReason::harness_error,
                                   "the reference could not be evaluated: " + reference.error_text(),
                                   {{"output", detail::capped(reference.output(), 4000)}}};
      return result;
    }
    const nlohmann::json& judged = reference.result();
    details["checks"] = judged.value("checks", nlohmann::json::array());
    details["plan"] = judged.value("plan", nlohmann::json::array());
    result.checks_total = judged.value("planned_calls", 0);
    details["reference_timings_ms"] = judged.value("timings_ms", nlohmann::json::object());
    details["expected"] = judged.value("expected", nlohmann::json::object());
    details["device_name"] = judged.value("device_name", std::string());
    details["footprint"] = judged.value("footprint", nlohmann::json::object());
    result.checks_passed = static_cast<int>(details["checks"].size());
    const nlohmann::json verdict = judged.value("verdict", nlohmann::json::object());
    const std::string stage = judged.value("candidate_stage", std::string("start"));
    const std::string where = stage == "start"         ? "before ModelNew was constructed"
                              : stage == "constructed" ? "before its first output"
                                                       : "after " + stage;

    auto reject = [&](RejectionReason reason, std::string message, nlohmann::json extra = nlohmann::json::object()) {
      result.correct = false;
      result.rejection = Rejection{reason, std::move(message), std::move(extra)};
      return result;
    };
    // What the worker saw itself comes first: these cannot be forged by the candidate.
    if (candidate.timed_out())
      return reject(RejectionReason::timeout, "the candidate did not finish within " +
                                                  std::to_string(policy.timeout.count() / 1000) + " s (stopped " +
                                                  where + "); look for an endless loop or a kernel that never ends");
    if (const auto signal = candidate.signal())
      return reject(RejectionReason::crashed, "the candidate process was killed by " + detail::signal_name(*signal) +
                                                  " " + where + " (an invalid memory access, an abort, or a limit)");
    if (candidate.stragglers() > 0)
      return reject(RejectionReason::work_outlived_call,
                    "the candidate left " + std::to_string(candidate.stragglers()) +
                        " process(es) running after it finished; ModelNew must not start processes");
    if (candidate_report.value("status", "") == "rejected" && candidate_report.contains("rejection") &&
        candidate_report["rejection"].is_object()) {
      const nlohmann::json& reported = candidate_report["rejection"];
      // A candidate may only blame itself: a reason it reports is never the harness's fault.
      RejectionReason reason = parse_rejection_reason(reported.value("reason", "")).value_or(RejectionReason::crashed);
      if (reason == RejectionReason::harness_error) reason = RejectionReason::crashed;
      std::string message = detail::capped(reported.value("message", std::string("the candidate was rejected")), 4000);
      if (auto blamed = detail::evaluator_out_of_memory(reason, message, details["footprint"]))
        return reject(RejectionReason::harness_error, std::move(*blamed), {{"candidate_message", message}});
      return reject(reason, std::move(message), reported.value("details", nlohmann::json::object()));
    }
    if (!verdict.value("correct", false)) {
      const std::string reason = verdict.value("reason", std::string("crashed"));
      if (reason != "candidate_reported" && reason != "crashed")
        return reject(parse_rejection_reason(reason).value_or(RejectionReason::harness_error),
                      verdict.value("message", std::string("the outputs differ from the reference")),
                      verdict.value("details", nlohmann::json::object()));
      if (candidate.has_error()) {
        std::string message = "the candidate process failed " + where + ": " + candidate.error_text();
        if (auto blamed = detail::evaluator_out_of_memory(RejectionReason::crashed, message, details["footprint"]))
          return reject(RejectionReason::harness_error, std::move(*blamed), {{"candidate_message", message}});
        return reject(RejectionReason::crashed, std::move(message));
      }
      const auto code = candidate.exit_code();
      return reject(RejectionReason::crashed, "the candidate process ended " + where +
                                                  " without reporting a result (exit status " +
                                                  (code ? std::to_string(*code) : std::string("unknown")) +
                                                  "); ModelNew must not exit the process or close its descriptors");
    }
    if (candidate_report.value("status", "") != "completed")
      return reject(RejectionReason::crashed, "the candidate process did not complete the verification (" +
                                                  candidate_report.value("status", std::string("no report")) + ")");
    if (result.checks_passed < result.checks_total)
      return reject(RejectionReason::harness_error, "only " + std::to_string(result.checks_passed) + " of " +
                                                        std::to_string(result.checks_total) + " checks were made");
    result.correct = true;
    return result;
  }

  HarnessOptions options_;
  VerificationPolicy policy_;
  bool owns_work_directory_ = false;
  std::unique_ptr<State> state_;
};

static_assert(Verifier<HarnessVerifier>);
static_assert(PrescreeningVerifier<HarnessVerifier>);
static_assert(LibraryPolicyVerifier<HarnessVerifier>);
static_assert(PolicyVerifier<HarnessVerifier>);
// How the shipped hosts hold it (one verifier for the Verify tool, the profiler's timing
// and the trusted evaluation): nothing of the above is lost.
static_assert(PrescreeningVerifier<SharedVerifier<HarnessVerifier>>);
static_assert(LibraryPolicyVerifier<SharedVerifier<HarnessVerifier>>);
static_assert(PolicyVerifier<SharedVerifier<HarnessVerifier>>);

}  // namespace cuda_agent

// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The link policy: a candidate's extension is judged by what it links. Every symbol the
/// built module leaves undefined (what the dynamic loader must find for it elsewhere)
/// must belong to an allowed family: the C++ runtime; the parts of the C library that
/// compute, allocate and print; the CUDA runtime; cuBLAS and cuDNN where the task's
/// library policy allows them; the torch functions that create, view, describe, copy and
/// check tensors; the pybind11 and Python C-API functions a binding is made of; torch's
/// CUDA streams, guards and devices. Anything else is refused, whatever the sources
/// call it: a `using` directive, a namespace alias, a name split over lines, a function
/// taken by its address or a declaration of one's own all end in the same symbol.
///
/// Some families are refused by name so that the message can say what they would do and
/// what to do instead (threads, processes, files, dynamic loading, the environment, raw
/// system calls, CUDA host callbacks and driver entry points, device-wide state, torch's
/// dispatcher and its mode stack, torch's own compute, Python code). They are checked
/// first: a refused family wins over a wider allowed one (std::thread over std::).
///
/// What a symbol list cannot see: code reached through pointer arithmetic or virtual
/// calls. It makes forgery harder and messages clearer; the verdict itself rests on
/// outputs and times the trusted side measures.
///
/// The tables were derived from the undefined symbols of the repository's legitimate
/// extensions (the adversarial suite's toolboxes and accepted candidates, the GPU
/// candidates, the demos and the starter), built for the CPU and for CUDA the way the
/// compile driver builds them.

#include <algorithm>    // any_of, find, sort
#include <array>        // array
#include <cctype>       // isalnum
#include <chrono>       // steady_clock, microseconds
#include <cstddef>      // size_t
#include <cstdlib>      // free
#include <filesystem>   // path
#include <fstream>      // ifstream
#include <iterator>     // istreambuf_iterator, begin, end
#include <optional>     // optional
#include <span>         // span
#include <stdexcept>    // runtime_error
#include <string>       // string
#include <string_view>  // string_view
#include <utility>      // move
#include <vector>       // vector

#include <cxxabi.h>  // __cxa_demangle

#include <nlohmann/json.hpp>

#include "cuda_agent/evaluation.hpp"
#include "cuda_agent/library_policy.hpp"
#include "cuda_agent/verify/detail/elf_symbols.hpp"

namespace cuda_agent {

/// What an allowed family needs from the task's library policy.
enum class SymbolFamilyCondition { always, cublas, cudnn };

/// A named group of symbols. Patterns match the symbol's qualified name (demangled,
/// without return type, parameters or version): "memcpy" exactly, "cuda*" as a prefix.
struct SymbolFamily {
  std::string_view name;
  /// Allowed families: why a legitimate binding needs them. Refused ones: what they
  /// would let a candidate do.
  std::string_view why;
  /// Refused families: what to do instead.
  std::string_view instead;
  std::span<const std::string_view> patterns;
  SymbolFamilyCondition condition = SymbolFamilyCondition::always;
  /// A further test of the qualified name, where a pattern alone is too wide.
  bool (*accepts)(std::string_view qualified_name) = nullptr;
};

namespace detail::link {

// ---- torch operators ----------------------------------------------------------------

/// `at::_ops::<op>::<member>` split into op and member; empty when not of that form.
[[nodiscard]] inline std::pair<std::string_view, std::string_view> torch_operator_parts(std::string_view name) {
  constexpr std::string_view prefix = "at::_ops::";
  if (name.substr(0, prefix.size()) != prefix) return {};
  name.remove_prefix(prefix.size());
  const std::size_t separator = name.find("::");
  if (separator == std::string_view::npos) return {name, {}};
  return {name.substr(0, separator), name.substr(separator + 2)};
}

[[nodiscard]] inline bool allowed_torch_operator(std::string_view name) {
  const auto [op, member] = torch_operator_parts(name);
  if (op.empty()) return false;
  if (std::find(std::begin(cuda_agent::detail::torch_operators_always_allowed),
                std::end(cuda_agent::detail::torch_operators_always_allowed),
                op) == std::end(cuda_agent::detail::torch_operators_always_allowed))
    return false;
  // `call` goes through the dispatcher (where the forward guard sees it); `redispatch`
  // skips the keys above the one given, the guard's among them.
  return member == "call" || member == "name" || member == "overload_name" || member == "schema_str";
}
[[nodiscard]] inline bool compute_torch_operator(std::string_view name) {
  const auto [op, member] = torch_operator_parts(name);
  return !op.empty() && member != "redispatch" && !allowed_torch_operator(name);
}
[[nodiscard]] inline bool redispatched_torch_operator(std::string_view name) {
  return torch_operator_parts(name).second == "redispatch";
}

// ---- the C math library ---------------------------------------------------------------

/// libm's functions, each in its double, float (`f`) and long double (`l`) forms and as
/// glibc's `__<name>_finite` aliases.
inline constexpr std::string_view math_functions[] = {
    "acos",     "acosh", "asin",   "asinh",   "atan",      "atan2",     "atanh",      "cbrt",  "ceil",
    "copysign", "cos",   "cosh",   "erf",     "erfc",      "exp",       "exp10",      "exp2",  "expm1",
    "fabs",     "fdim",  "floor",  "fma",     "fmax",      "fmin",      "fmod",       "frexp", "hypot",
    "ilogb",    "ldexp", "lgamma", "llrint",  "llround",   "log",       "log10",      "log1p", "log2",
    "logb",     "lrint", "lround", "modf",    "nearbyint", "nextafter", "nexttoward", "pow",   "remainder",
    "remquo",   "rint",  "round",  "scalbln", "scalbn",    "sin",       "sincos",     "sinh",  "sqrt",
    "tan",      "tanh",  "tgamma", "trunc",   "j0",        "j1",        "y0",         "y1",    "lgamma_r"};

[[nodiscard]] inline bool math_function(std::string_view name) {
  if (name.substr(0, 2) == "__" && name.size() > 9 && name.substr(name.size() - 7) == "_finite")
    name = name.substr(2, name.size() - 9);
  for (std::string_view base : math_functions) {
    if (name == base) return true;
    if (name.size() == base.size() + 1 && name.substr(0, base.size()) == base &&
        (name.back() == 'f' || name.back() == 'l'))
      return true;
  }
  return false;
}

// ---- families, refused first ----------------------------------------------------------------

inline constexpr std::string_view threads[] = {"pthread_create",
                                               "pthread_detach",
                                               "pthread_join",
                                               "pthread_tryjoin_np",
                                               "pthread_timedjoin_np",
                                               "pthread_clockjoin_np",
                                               "pthread_cancel",
                                               "pthread_kill",
                                               "pthread_sigqueue",
                                               "pthread_exit",
                                               "thrd_create",
                                               "thrd_detach",
                                               "thrd_join",
                                               "clone",
                                               "clone3",
                                               "__clone",
                                               "__clone2",
                                               "std::thread::*",
                                               "std::jthread::*",
                                               "std::__future_base::*",
                                               "std::async*",
                                               "std::this_thread::*",
                                               "GOMP_*",
                                               "omp_*",
                                               "__kmpc_*",
                                               "at::launch*",
                                               "at::intraop_launch*",
                                               "at::internal::invoke_parallel*",
                                               "at::internal::lazy_init_num_threads*",
                                               "at::set_num_threads*",
                                               "at::set_num_interop_threads*",
                                               "at::init_num_threads*",
                                               "at::get_thread_num*",
                                               "at::in_parallel_region*",
                                               "at::internal::set_thread_num*",
                                               "c10::ThreadPool::*",
                                               "c10::TaskThreadPool*",
                                               "at::PTThreadPool::*",
                                               "tbb::*",
                                               "nanosleep",
                                               "clock_nanosleep",
                                               "usleep",
                                               "sleep",
                                               "sched_yield"};
inline constexpr std::string_view processes[] = {"fork",
                                                 "vfork",
                                                 "_Fork",
                                                 "__fork",
                                                 "execve",
                                                 "execv",
                                                 "execvp",
                                                 "execvpe",
                                                 "execl",
                                                 "execlp",
                                                 "execle",
                                                 "fexecve",
                                                 "execveat",
                                                 "posix_spawn*",
                                                 "system",
                                                 "popen",
                                                 "pclose",
                                                 "wait",
                                                 "waitpid",
                                                 "waitid",
                                                 "wait3",
                                                 "wait4",
                                                 "kill",
                                                 "killpg",
                                                 "tgkill",
                                                 "raise",
                                                 "sigaction",
                                                 "signal",
                                                 "__sysv_signal",
                                                 "sigprocmask",
                                                 "pthread_sigmask",
                                                 "prctl",
                                                 "setuid",
                                                 "setgid",
                                                 "seteuid",
                                                 "setegid",
                                                 "setresuid",
                                                 "setresgid",
                                                 "daemon",
                                                 "setsid",
                                                 "_exit",
                                                 "_Exit",
                                                 "quick_exit",
                                                 "c10::ProcessGroup*"};
inline constexpr std::string_view files[] = {"open",
                                             "open64",
                                             "__open*",
                                             "openat",
                                             "openat64",
                                             "__openat*",
                                             "creat",
                                             "creat64",
                                             "fopen",
                                             "fopen64",
                                             "freopen",
                                             "freopen64",
                                             "fdopen",
                                             "fmemopen",
                                             "open_memstream",
                                             "opendir",
                                             "fdopendir",
                                             "readdir",
                                             "readdir64",
                                             "readdir_r",
                                             "scandir*",
                                             "nftw*",
                                             "ftw*",
                                             "glob",
                                             "glob64",
                                             "stat",
                                             "stat64",
                                             "lstat",
                                             "lstat64",
                                             "fstat",
                                             "fstat64",
                                             "fstatat*",
                                             "__xstat*",
                                             "__lxstat*",
                                             "__fxstat*",
                                             "statx",
                                             "statfs*",
                                             "fstatfs*",
                                             "access",
                                             "faccessat",
                                             "euidaccess",
                                             "eaccess",
                                             "unlink",
                                             "unlinkat",
                                             "remove",
                                             "rename",
                                             "renameat*",
                                             "mkdir",
                                             "mkdirat",
                                             "rmdir",
                                             "chdir",
                                             "fchdir",
                                             "chroot",
                                             "chmod",
                                             "fchmod",
                                             "fchmodat",
                                             "chown",
                                             "fchown",
                                             "lchown",
                                             "fchownat",
                                             "truncate*",
                                             "ftruncate*",
                                             "mkstemp*",
                                             "mkostemp*",
                                             "mkdtemp",
                                             "tmpfile*",
                                             "tmpnam*",
                                             "tempnam",
                                             "mktemp",
                                             "read",
                                             "__read_chk",
                                             "write",
                                             "pread*",
                                             "pwrite*",
                                             "readv",
                                             "writev",
                                             "preadv*",
                                             "pwritev*",
                                             "lseek*",
                                             "close",
                                             "close_range",
                                             "dup",
                                             "dup2",
                                             "dup3",
                                             "fcntl*",
                                             "ioctl",
                                             "mmap",
                                             "mmap64",
                                             "munmap",
                                             "mremap",
                                             "msync",
                                             "sendfile*",
                                             "splice",
                                             "tee",
                                             "vmsplice",
                                             "pipe",
                                             "pipe2",
                                             "mkfifo*",
                                             "mknod*",
                                             "socket",
                                             "socketpair",
                                             "connect",
                                             "bind",
                                             "listen",
                                             "accept",
                                             "accept4",
                                             "send",
                                             "sendto",
                                             "sendmsg",
                                             "recv",
                                             "recvfrom",
                                             "recvmsg",
                                             "getaddrinfo",
                                             "gethostbyname*",
                                             "shm_open",
                                             "shm_unlink",
                                             "memfd_create",
                                             "inotify_*",
                                             "fanotify_*",
                                             "readlink",
                                             "readlinkat",
                                             "realpath",
                                             "symlink*",
                                             "link",
                                             "linkat",
                                             "getcwd",
                                             "get_current_dir_name",
                                             "fileno",
                                             "fileno_unlocked",
                                             "fread",
                                             "fread_unlocked",
                                             "fgets",
                                             "fgetc",
                                             "getc",
                                             "getchar",
                                             "getline",
                                             "getdelim",
                                             "fscanf",
                                             "scanf",
                                             "__isoc99_fscanf",
                                             "__isoc99_scanf",
                                             "__isoc23_fscanf",
                                             "__isoc23_scanf",
                                             "std::filesystem::*",
                                             "std::experimental::filesystem::*",
                                             "std::basic_filebuf*",
                                             "std::basic_ifstream*",
                                             "std::basic_ofstream*",
                                             "std::basic_fstream*",
                                             "std::__basic_file*",
                                             "c10::FileStore*",
                                             "caffe2::serialize::*",
                                             "torch::serialize::*",
                                             "torch::load*",
                                             "torch::save*",
                                             "torch::pickle_*"};
inline constexpr std::string_view dynamic_loading[] = {"dlopen",
                                                       "dlmopen",
                                                       "dlsym",
                                                       "dlvsym",
                                                       "dladdr",
                                                       "dladdr1",
                                                       "dlinfo",
                                                       "dlerror",
                                                       "dlclose",
                                                       "dl_iterate_phdr",
                                                       "_dl_*",
                                                       "__libc_dl*",
                                                       "at::DynamicLibrary::*",
                                                       "c10::DynamicLibrary::*",
                                                       "getauxval",
                                                       "__getauxval"};
inline constexpr std::string_view environment[] = {"getenv",
                                                   "secure_getenv",
                                                   "__secure_getenv",
                                                   "__libc_secure_getenv",
                                                   "setenv",
                                                   "putenv",
                                                   "unsetenv",
                                                   "clearenv",
                                                   "environ",
                                                   "__environ",
                                                   "_environ",
                                                   "c10::utils::get_env*",
                                                   "c10::utils::set_env*",
                                                   "c10::utils::has_env*",
                                                   "c10::utils::check_env*",
                                                   "gethostname",
                                                   "getlogin*",
                                                   "getpwuid*",
                                                   "getpwnam*",
                                                   "getuid",
                                                   "geteuid",
                                                   "getgid",
                                                   "getegid",
                                                   "getpid",
                                                   "getppid",
                                                   "gettid",
                                                   "uname",
                                                   "sysinfo"};
inline constexpr std::string_view raw_system[] = {
    "syscall",           "mprotect",   "pkey_mprotect", "pkey_alloc",    "pkey_free",  "process_vm_readv",
    "process_vm_writev", "ptrace",     "madvise",       "posix_madvise", "mlock*",     "munlock*",
    "personality",       "seccomp",    "arch_prctl",    "modify_ldt",    "setrlimit*", "prlimit*",
    "sigaltstack",       "setcontext", "swapcontext",   "makecontext",   "getcontext", "longjmp",
    "_longjmp",          "siglongjmp", "__longjmp_chk", "setjmp",        "_setjmp",    "__sigsetjmp"};
inline constexpr std::string_view cuda_host_callbacks[] = {
    "cudaLaunchHostFunc*",   "cudaStreamAddCallback*",      "cudaGetDriverEntryPoint*",
    "cudaGraphAddHostNode*", "cudaGraphHostNodeSetParams*", "cudaGraphExecHostNodeSetParams*",
    "cuGetProcAddress*",     "cuLaunchHostFunc*",           "cuStreamAddCallback*",
    "cuGraphAddHostNode*",   "cudaGetExportTable",          "cuGetExportTable"};
inline constexpr std::string_view device_memory_of_its_own[] = {"cudaMalloc",         "cudaMallocManaged*",
                                                                "cudaMallocHost*",    "cudaHostAlloc*",
                                                                "cudaHostRegister*",  "cudaMallocPitch*",
                                                                "cudaMalloc3D*",      "cudaMallocArray*",
                                                                "cudaMalloc3DArray*", "cudaMallocMipmappedArray*",
                                                                "cudaMallocAsync*",   "cudaMallocFromPoolAsync*",
                                                                "cudaMemPoolCreate*", "cuMemAlloc*",
                                                                "cuMemCreate*",       "cuMemHostAlloc*",
                                                                "cuMemHostRegister*", "cuMemAllocManaged*",
                                                                "cuMemAllocAsync*",   "cuMemAllocFromPoolAsync*",
                                                                "cuMemPoolCreate*"};
inline constexpr std::string_view cuda_device_state[] = {"cudaDeviceReset",
                                                         "cudaThreadExit",
                                                         "cudaDeviceSetLimit",
                                                         "cudaThreadSetLimit",
                                                         "cudaCtxResetPersistingL2Cache",
                                                         "cudaDeviceSetCacheConfig",
                                                         "cudaThreadSetCacheConfig",
                                                         "cudaDeviceSetSharedMemConfig",
                                                         "cudaStreamSetAttribute*",
                                                         "cudaGraphKernelNodeSetAttribute*",
                                                         "cudaIpc*",
                                                         "cudaDeviceSetMemPool",
                                                         "cudaSetDeviceFlags",
                                                         "cudaSetValidDevices",
                                                         "cudaProfilerStart",
                                                         "cudaProfilerStop",
                                                         "cudaDeviceSetGraphMemAttribute",
                                                         "cuDevicePrimaryCtxReset*",
                                                         "cuCtxResetPersistingL2Cache",
                                                         "cuCtxSetLimit",
                                                         "cuStreamSetAttribute*",
                                                         "cuIpc*",
                                                         "cuCtxSetCacheConfig",
                                                         "cuCtxDestroy*",
                                                         "cuDevicePrimaryCtxSetFlags*"};
inline constexpr std::string_view dispatcher[] = {
    // entry points first (they name the family in a message), the helpers they pull in after
    "c10::Dispatcher::*",
    "c10::impl::tls_*",
    "c10::impl::_force_tls_local_dispatch_key_set*",
    "c10::impl::IncludeDispatchKeyGuard*",
    "c10::impl::ForceDispatchKeyGuard*",
    "c10::impl::TorchDispatchModeTLS*",
    "c10::impl::PythonDispatcherTLS*",
    "c10::impl::PythonTorchFunctionTLS*",
    "at::impl::PythonTorchFunctionTLS*",
    "torch::Library::*",
    "torch::CppFunction::*",
    "torch::detail::TorchLibraryInit*",
    "c10::RegisterOperators*",
    "torch::jit::*",
    "torch::autograd::Engine*",
    "torch::autograd::backward*",
    "torch::autograd::grad*",
    "at::functionalization::*",
    "c10::OperatorHandle*",
    "c10::TypedOperatorHandle*",
    "c10::impl::OperatorEntry*",
    "c10::OperatorName*",
    "c10::FunctionSchema*",
    "c10::impl::raw_local_dispatch_key_set",
    "at::impl::MaybeSetTLSOnEntryGuard*",
    "c10::impl::PyInterpreter*",
    "c10::impl::PythonOpRegistrationTrampoline*",
    "c10::parseDispatchKey*",
    "c10::getRuntimeDispatchKeySet*",
    "c10::dispatch_trace_nesting*",
    "c10::show_dispatch_trace*",
    "c10::detail::_print_dispatch_trace*",
    "c10::initializeFunctionalityOffsetsAndMasks*",
    "at::RecordFunction*",
    "at::getStepCallbacks*",
    "at::addThreadLocalCallback*",
    "at::addGlobalCallback*",
    "at::ThreadLocalState*",
    "at::ThreadLocalStateGuard*",
    "c10::ThreadLocalDebugInfo*",
    "c10::IValue::*",
    "c10::KernelFunction*",
    "c10::BoxedKernel*",
    "torch::autograd::Node*",
    "torch::autograd::impl::*"};
/// State the C and C++ libraries keep for the process, which a call can leave for the next
/// one without a variable of its own: the C generators' sequences, the words of the
/// standard streams, the global locale.
inline constexpr std::string_view library_state[] = {"rand",
                                                     "srand",
                                                     "random",
                                                     "srandom",
                                                     "initstate",
                                                     "setstate",
                                                     "drand48",
                                                     "erand48",
                                                     "lrand48",
                                                     "nrand48",
                                                     "mrand48",
                                                     "jrand48",
                                                     "srand48",
                                                     "seed48",
                                                     "lcong48",
                                                     "setlocale",
                                                     "uselocale",
                                                     "std::ios_base::xalloc*",
                                                     "std::ios_base::_M_grow_words*",
                                                     "std::ios_base::register_callback*",
                                                     "std::locale::global*"};
inline constexpr std::string_view global_settings[] = {"at::globalContext*",
                                                       "at::Context::*",
                                                       "c10::SetAllocator*",
                                                       "c10::SetCPUAllocator*",
                                                       "c10::cuda::CUDACachingAllocator::setAllocatorSettings*",
                                                       "c10::cuda::CUDACachingAllocator::setMemoryFraction*",
                                                       "c10::CachingAllocatorConfig*",
                                                       "c10::set_default_dtype*",
                                                       "at::manual_seed*",
                                                       "at::set_default_dtype*",
                                                       "torch::manual_seed*",
                                                       "torch::set_num_threads*",
                                                       "at::vitals::*",
                                                       "c10::SetStackTraceFetcher*",
                                                       "c10::SetWarningHandler*",
                                                       "c10::WarningUtils::set_warning_handler*",
                                                       "c10::WarningUtils::set_warnAlways*"};
inline constexpr std::string_view torch_namespaces[] = {"at::native::*",
                                                        "at::cpu::*",
                                                        "at::meta::*",
                                                        "at::compositeexplicitautograd*",
                                                        "at::compositeimplicitautograd*",
                                                        "at::sparsecpu::*",
                                                        "at::sparsecuda::*",
                                                        "at::quantizedcpu::*",
                                                        "at::quantizedcuda::*",
                                                        "at::mkldnn*",
                                                        "at::mps::*",
                                                        "at::xpu::*",
                                                        "at::cpublas::*",
                                                        "at::vml::*",
                                                        "at::cuda::*",
                                                        "at::linalg*",
                                                        "at::fft*",
                                                        "at::special*",
                                                        "at::nested*",
                                                        "at::sparse*",
                                                        "at::indexing::*",
                                                        "at::TensorIterator*",
                                                        "at::Tensor::*",
                                                        "torch::nn::*",
                                                        "torch::optim::*",
                                                        "torch::linalg::*",
                                                        "torch::fft::*",
                                                        "torch::special::*",
                                                        "torch::nested::*",
                                                        "torch::data::*",
                                                        "torch::autograd::*",
                                                        "at::_ops::*"};
inline constexpr std::string_view python_code[] = {"PyRun_*",
                                                   "PyImport_*",
                                                   "PyEval_Eval*",
                                                   "PyEval_Call*",
                                                   "PyEval_GetFrame*",
                                                   "PyEval_GetGlobals",
                                                   "PyEval_GetLocals",
                                                   "PyEval_SetTrace",
                                                   "PyEval_SetProfile*",
                                                   "PyEval_MergeCompilerFlags",
                                                   "Py_CompileString*",
                                                   "Py_Initialize*",
                                                   "Py_Finalize*",
                                                   "Py_Exit",
                                                   "Py_Main",
                                                   "Py_BytesMain",
                                                   "Py_RunMain",
                                                   "Py_NewInterpreter*",
                                                   "Py_EndInterpreter",
                                                   "Py_AtExit",
                                                   "PySys_*",
                                                   "PyThreadState_GetFrame",
                                                   "PyThreadState_SetAsyncExc",
                                                   "PyFrame_GetLocals",
                                                   "PyFrame_GetGlobals",
                                                   "PyFrame_GetBuiltins",
                                                   "PyFrame_LocalsToFast",
                                                   "PyFrame_FastToLocals*",
                                                   "PyFrame_New",
                                                   "PyObject_Call",
                                                   "PyObject_CallMethod*",
                                                   "PyObject_Vectorcall*",
                                                   "PyObject_CallNoArgs",
                                                   "PyObject_CallOneArg",
                                                   "PyObject_CallFunction",
                                                   "_PyObject_CallFunction*",
                                                   "_PyObject_CallMethod*",
                                                   "_PyObject_Call*",
                                                   "_PyObject_Vectorcall*",
                                                   "_PyObject_FastCall*",
                                                   "PyVectorcall_*",
                                                   "PyCFunction_Call",
                                                   "PyMarshal_*",
                                                   "PyCode_New*",
                                                   "PyFunction_New*",
                                                   "PyOS_*",
                                                   "PyGC_*",
                                                   "PyInterpreterState_Main",
                                                   "PyInterpreterState_Head",
                                                   "PyInterpreterState_Next",
                                                   "PyInterpreterState_ThreadHead",
                                                   "PyThreadState_Next",
                                                   "PyEval_SetTraceAllThreads",
                                                   "PyAST_*",
                                                   "PyParser_*",
                                                   "_PyRun_*",
                                                   "_PyImport_*",
                                                   "_PyEval_*",
                                                   "_PySys_*"};

// ---- allowed families ---------------------------------------------------------------------

inline constexpr std::string_view cxx_runtime[] = {
    "operator new*", "operator delete*", "__cxa_*", "__gxx_personality_v0", "__gcc_personality_v0", "_Unwind_*",
    "__dynamic_cast", "__cxxabiv1::*", "std::*", "__gnu_cxx::*", "__gnu_debug::*", "__gmon_start__",
    "_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable", "__stack_chk_fail", "__tls_get_addr",
    "__libc_single_threaded", "atexit", "exit", "abort", "__assert_fail",
    // std::call_once's trampoline (its callable and call are the TLS variables std::__once_*)
    "__once_proxy",
    // libgcc's arithmetic helpers (128-bit integers, half floats, complex products, bit counts)
    "__popcount*", "__clz*", "__ctz*", "__ffs*", "__parity*", "__bswap*", "__divti3", "__udivti3", "__modti3",
    "__umodti3", "__udivmodti4", "__muldc3", "__mulsc3", "__mulxc3", "__divdc3", "__divsc3", "__divxc3",
    "__extendhfsf2", "__extendhfdf2", "__truncsfhf2", "__truncdfhf2", "__extendbfsf2", "__truncsfbf2", "__truncdfbf2",
    "__float*", "__fix*", "__powi*", "__ashlti3", "__ashrti3", "__lshrti3", "__cpu_indicator_init", "__cpu_model",
    "__cpu_features2"};
inline constexpr std::string_view c_library[] = {"__errno_location",
                                                 "malloc",
                                                 "calloc",
                                                 "realloc",
                                                 "reallocarray",
                                                 "free",
                                                 "aligned_alloc",
                                                 "posix_memalign",
                                                 "memalign",
                                                 "malloc_usable_size",
                                                 "memcpy",
                                                 "memmove",
                                                 "memset",
                                                 "memcmp",
                                                 "memchr",
                                                 "memrchr",
                                                 "rawmemchr",
                                                 "mempcpy",
                                                 "__memcpy_chk",
                                                 "__memmove_chk",
                                                 "__memset_chk",
                                                 "__mempcpy_chk",
                                                 "bzero",
                                                 "explicit_bzero",
                                                 "strlen",
                                                 "strnlen",
                                                 "strcmp",
                                                 "strncmp",
                                                 "strcasecmp",
                                                 "strncasecmp",
                                                 "strchr",
                                                 "strrchr",
                                                 "strchrnul",
                                                 "strstr",
                                                 "strcasestr",
                                                 "strcpy",
                                                 "strncpy",
                                                 "stpcpy",
                                                 "stpncpy",
                                                 "strcat",
                                                 "strncat",
                                                 "__strcpy_chk",
                                                 "__strncpy_chk",
                                                 "__strcat_chk",
                                                 "__stpcpy_chk",
                                                 "strdup",
                                                 "strndup",
                                                 "__strdup",
                                                 "strcspn",
                                                 "strspn",
                                                 "strpbrk",
                                                 "strtok",
                                                 "strtok_r",
                                                 "strerror",
                                                 "strerror_r",
                                                 "__xpg_strerror_r",
                                                 "strsignal",
                                                 "strtol",
                                                 "strtoll",
                                                 "strtoul",
                                                 "strtoull",
                                                 "strtod",
                                                 "strtof",
                                                 "strtold",
                                                 "strtoimax",
                                                 "strtoumax",
                                                 "__isoc23_strtol",
                                                 "__isoc23_strtoll",
                                                 "__isoc23_strtoul",
                                                 "__isoc23_strtoull",
                                                 "__isoc23_sscanf",
                                                 "__isoc99_sscanf",
                                                 "sscanf",
                                                 "atoi",
                                                 "atol",
                                                 "atoll",
                                                 "atof",
                                                 "abs",
                                                 "labs",
                                                 "llabs",
                                                 "div",
                                                 "ldiv",
                                                 "lldiv",
                                                 "qsort",
                                                 "qsort_r",
                                                 "bsearch",
                                                 "rand_r",
                                                 "__ctype_b_loc",
                                                 "__ctype_tolower_loc",
                                                 "__ctype_toupper_loc",
                                                 "tolower",
                                                 "toupper",
                                                 "isalpha",
                                                 "isdigit",
                                                 "isspace",
                                                 "isalnum",
                                                 "isupper",
                                                 "islower",
                                                 "isprint",
                                                 "isxdigit",
                                                 "wcslen",
                                                 "wcscmp",
                                                 "wmemcpy",
                                                 "wmemmove",
                                                 "wmemset",
                                                 "wmemchr",
                                                 "wmemcmp",
                                                 "btowc",
                                                 "wctob",
                                                 "mbrtowc",
                                                 "wcrtomb",
                                                 "mbstowcs",
                                                 "wcstombs",
                                                 "printf",
                                                 "fprintf",
                                                 "vprintf",
                                                 "vfprintf",
                                                 "snprintf",
                                                 "sprintf",
                                                 "vsnprintf",
                                                 "vsprintf",
                                                 "asprintf",
                                                 "vasprintf",
                                                 "__printf_chk",
                                                 "__fprintf_chk",
                                                 "__vfprintf_chk",
                                                 "__snprintf_chk",
                                                 "__sprintf_chk",
                                                 "__vsnprintf_chk",
                                                 "__vsprintf_chk",
                                                 "__asprintf_chk",
                                                 "puts",
                                                 "fputs",
                                                 "fputc",
                                                 "putc",
                                                 "putchar",
                                                 "_IO_putc",
                                                 "fwrite",
                                                 "fwrite_unlocked",
                                                 "fputs_unlocked",
                                                 "fflush",
                                                 "fflush_unlocked",
                                                 "perror",
                                                 "stdout",
                                                 "stderr",
                                                 "clock_gettime",
                                                 "gettimeofday",
                                                 "time",
                                                 "clock",
                                                 "localtime_r",
                                                 "gmtime_r",
                                                 "strftime",
                                                 "nan",
                                                 "nanf",
                                                 "nanl",
                                                 "__isnan",
                                                 "__isnanf",
                                                 "__isinf",
                                                 "__isinff",
                                                 "__finite",
                                                 "__finitef",
                                                 "__fpclassify",
                                                 "__fpclassifyf",
                                                 "__signbit",
                                                 "__signbitf",
                                                 "pthread_mutex_*",
                                                 "pthread_mutexattr_*",
                                                 "pthread_once",
                                                 "pthread_key_create",
                                                 "__pthread_key_create",
                                                 "pthread_key_delete",
                                                 "pthread_getspecific",
                                                 "pthread_setspecific",
                                                 "pthread_self",
                                                 "pthread_equal",
                                                 "pthread_cond_*",
                                                 "pthread_condattr_*",
                                                 "pthread_rwlock_*",
                                                 "pthread_spin_*",
                                                 "__pthread_once",
                                                 "__pthread_mutex_lock",
                                                 "__pthread_mutex_unlock",
                                                 "sem_*"};
inline constexpr std::string_view cuda_runtime[] = {"cuda*", "__cuda*", "__nv_*", "__fatbinwrap*"};
inline constexpr std::string_view cublas[] = {"cublas*", "at::cuda::getCurrentCUDABlasHandle*",
                                              "at::cuda::getCurrentCUDABlasLtHandle*",
                                              "at::cuda::getCUDABlasLtWorkspace*", "at::cuda::getChosenWorkspaceSize*"};
inline constexpr std::string_view cudnn[] = {"cudnn*", "at::native::getCudnnHandle*"};
inline constexpr std::string_view python_binding[] = {
    "PyBaseObject_Type", "PyBool_*", "PyByteArray_*", "PyBytes_*", "PyCFunction_*", "PyCMethod_New", "PyCapsule_*",
    "PyComplex_*", "PyDict_*", "PyErr_*", "PyExc_*", "PyException_*", "PyFloat_*", "PyFrame_GetBack", "PyFrame_GetCode",
    "PyFrame_GetLineNumber", "PyCode_Addr2Line", "PyGILState_*", "PyIndex_Check", "PyInstanceMethod_*",
    "PyInterpreterState_Get", "PyInterpreterState_GetDict", "PyInterpreterState_GetID", "PyIter_Next", "PyList_*",
    "PyLong_*", "PyMem_*", "PyMemoryView_*", "PyBuffer_*", "PyModuleDef_Init", "PyModule_AddObject",
    "PyModule_AddObjectRef", "PyModule_Create2", "PyModule_New", "PyModule_NewObject", "PyModule_Type",
    "PyModule_GetName", "PyNumber_Add", "PyNumber_Check", "PyNumber_Float", "PyNumber_Long", "PyNumber_Index",
    "PyObject_CallFunctionObjArgs", "PyObject_CallObject", "PyObject_ClearWeakRefs", "PyObject_GC_*",
    "PyObject_GetAttr", "PyObject_GetAttrString", "PyObject_SetAttr", "PyObject_SetAttrString", "PyObject_HasAttr",
    "PyObject_HasAttrString", "PyObject_DelAttrString", "PyObject_GetItem", "PyObject_SetItem", "PyObject_DelItem",
    "PyObject_IsInstance", "PyObject_IsSubclass", "PyObject_IsTrue", "PyObject_Not", "PyObject_Repr", "PyObject_Str",
    "PyObject_Hash", "PyObject_RichCompare*", "PyObject_Length", "PyObject_Size", "PyObject_Type", "PyObject_GetIter",
    "PyObject_Malloc", "PyObject_Free", "PyObject_Init", "PyObject_GenericGetAttr", "PyObject_GenericSetAttr",
    "PyObject_GenericGetDict", "PyObject_GenericSetDict", "PyObject_GetBuffer", "PyProperty_Type", "PySequence_Check",
    "PySequence_Size", "PySequence_Length", "PySequence_GetItem", "PySequence_Fast", "PySequence_Tuple",
    "PySequence_List", "PySlice_*", "PyStaticMethod_*", "PyThreadState_Get", "PyThreadState_New", "PyThreadState_Clear",
    "PyThreadState_Delete", "PyThreadState_DeleteCurrent", "PyThreadState_Swap", "PyThread_tss_*", "PyTuple_*",
    "PyType_*", "PyUnicode_*", "PyWeakref_*", "PyEval_AcquireThread", "PyEval_ReleaseThread", "PyEval_SaveThread",
    "PyEval_RestoreThread", "PyEval_GetBuiltins", "Py_GetVersion", "Py_IncRef", "Py_DecRef", "_Py_Dealloc",
    "_Py_NoneStruct", "_Py_TrueStruct", "_Py_FalseStruct", "_Py_NotImplementedStruct", "_Py_EllipsisObject",
    "_Py_IncRef", "_Py_DecRef", "_PyObject_GetDictPtr", "_PyObject_New", "_PyThreadState_UncheckedGet",
    "_PyType_Lookup", "_Py_IsFinalizing", "Py_IsInitialized", "PyCallable_Check", "PyArg_*",
    // type objects pybind11's casters compare against
    "PySet_*", "PyFrozenSet_*", "PyGen_Type", "PyCoro_Type", "PyRange_Type", "PyDictKeys_Type", "PyDictValues_Type",
    "PyDictItems_Type", "PyEllipsis_Type", "PySeqIter_Type", "PyCallIter_Type", "PyMethod_Type", "PyFunction_Type",
    "PyModuleDef_Type", "PySuper_Type", "PyClassMethod_*", "PyMethodDescr_Type", "PyWrapperDescr_Type",
    "PyGetSetDescr_Type", "PyMemberDescr_Type", "PyDictProxy_*", "PyEnum_Type", "PyReversed_Type",
    "pybind11::detail::type_caster<*", "THPVariableClass", "THPVariable_Wrap*", "THPVariable_Check*",
    "THPVariable_Unpack*", "THPDtype_New", "THPDtypeType", "THPDeviceType", "THPDevice_New", "THPLayoutType",
    "THPMemoryFormatType", "torch::getTHPDtype*", "torch::getTHPLayout*", "torch::getTHPMemoryFormat*", "THPUtils_*"};
inline constexpr std::string_view tensors[] = {"at::TensorBase::*",
                                               "at::Tensor::item*",
                                               "at::Tensor::data_ptr*",
                                               "at::Tensor::mutable_data_ptr*",
                                               "at::Tensor::const_data_ptr*",
                                               "at::Tensor::narrow*",
                                               "at::Tensor::select*",
                                               "at::Tensor::slice_symint",
                                               "at::Tensor::as_strided_symint",
                                               "at::Tensor::new_empty*",
                                               "at::Tensor::new_zeros*",
                                               "at::Tensor::new_full*",
                                               "at::Tensor::to",
                                               "at::Tensor::expect_contiguous",
                                               "at::Tensor::print",
                                               "at::Tensor::toString",
                                               "at::Tensor::wrap_tensor_impl",
                                               "at::TensorMaker::*",
                                               "at::detail::empty_*",
                                               "at::empty_cpu*",
                                               "at::empty_cuda*",
                                               "at::detail::computeStorageNbytes*",
                                               "at::getCPUAllocator",
                                               "c10::TensorImpl::*",
                                               "c10::StorageImpl::*",
                                               "c10::Storage::*",
                                               "c10::UndefinedTensorImpl::*",
                                               "c10::TensorOptions*",
                                               "c10::SymInt::*",
                                               "c10::SymBool::*",
                                               "c10::SymFloat::*",
                                               "c10::SymNodeImpl*",
                                               "c10::SymbolicShapeMeta::*",
                                               "c10::impl::cow::*",
                                               "c10::impl::SizesAndStrides::*",
                                               "c10::impl::ExcludeDispatchKeyGuard::*",
                                               "c10::AutogradMetaInterface*",
                                               "torch::autograd::AutogradMeta*",
                                               "torch::autograd::VariableHooks*",
                                               "c10::GradMode::*",
                                               "c10::AutogradState::*",
                                               "c10::InferenceMode*",
                                               "c10::Scalar::*",
                                               "c10::Device::*",
                                               "c10::DeviceTypeName*",
                                               "c10::isValidDeviceType*",
                                               "c10::toString*",
                                               "c10::operator<<*",
                                               "c10::get_default_dtype*",
                                               "c10::GetAllocator*",
                                               "c10::GetCPUAllocator*",
                                               "c10::Allocator::*",
                                               "c10::DataPtr*",
                                               "c10::intrusive_ptr_target*",
                                               "c10::impl::device_guard_impl_registry",
                                               "c10::impl::getDeviceGuardImpl*",
                                               "c10::impl::GPUTrace::*",
                                               "c10::Stream::*",
                                               "c10::Event*",
                                               "c10::impl::VirtualGuardImpl*",
                                               "c10::getTypeMetaDatas*",
                                               "caffe2::TypeMeta::*",
                                               "caffe2::detail::*",
                                               "c10::elementSize*",
                                               "c10::ScalarType*",
                                               "c10::Half*",
                                               "c10::BFloat16*",
                                               "c10::detail::fp16*",
                                               "c10::ivalue::*",
                                               "c10::str*",
                                               "c10::Layout*",
                                               "c10::MemoryFormat*",
                                               "c10::IntArrayRef*",
                                               "c10::detail::infer_size*",
                                               "at::infer_size*",
                                               "at::detail::defaultStrides*",
                                               "c10::ArrayRef*",
                                               "c10::SmallVectorBase*",
                                               "c10::SmallVectorImpl*"};
inline constexpr std::string_view checks[] = {"c10::detail::torchCheckFail*",
                                              "c10::detail::torchInternalAssertFail*",
                                              "c10::detail::maybe_wrap_dim_slow*",
                                              "c10::detail::torchCheckMsgImpl*",
                                              "c10::detail::StripBasename*",
                                              "c10::Error*",
                                              "c10::ValueError*",
                                              "c10::IndexError*",
                                              "c10::TypeError*",
                                              "c10::NotImplementedError*",
                                              "c10::LinAlgError*",
                                              "c10::OutOfMemoryError*",
                                              "c10::EnforceFiniteError*",
                                              "c10::AcceleratorError*",
                                              "c10::Warning*",
                                              "c10::warn*",
                                              "c10::WarningUtils::get_warnAlways*",
                                              "c10::WarningUtils::WarningHandlerGuard*",
                                              "c10::throwNullDataPtrError",
                                              "c10::warnDeprecatedDataPtr",
                                              "c10::SourceLocation*",
                                              "c10::get_backtrace*",
                                              "c10::GetExceptionString*",
                                              "c10::detail::deprecated_AT_ERROR*",
                                              "c10::detail::torchInternalAssertFail*",
                                              "c10::TORCH_CHECK*"};
inline constexpr std::string_view cuda_context[] = {"c10::cuda::*",
                                                    "at::cuda::getCurrentCUDAStream*",
                                                    "at::cuda::getDefaultCUDAStream*",
                                                    "at::cuda::getStreamFromPool*",
                                                    "at::cuda::getStreamFromExternal*",
                                                    "at::cuda::getCurrentDeviceProperties*",
                                                    "at::cuda::getDeviceProperties*",
                                                    "at::cuda::warp_size*",
                                                    "at::cuda::getNumGPUs*",
                                                    "at::cuda::is_available*",
                                                    "at::cuda::device_count*",
                                                    "at::cuda::CUDAGraph::*",
                                                    "at::cuda::graph_pool_handle*",
                                                    "at::cuda::CUDAEvent*",
                                                    "at::cuda::CUDAStream*",
                                                    "at::cuda::detail::getCUDAHooks*",
                                                    "at::cuda::getCurrentDeviceId*",
                                                    "at::cuda::check_status*",
                                                    "at::cuda::getChosenWorkspaceSize*",
                                                    "at::cuda::CUDAStreamGuard*"};

[[nodiscard]] inline bool accepts_math(std::string_view name) { return math_function(name); }

/// A fundamental type, as "typeinfo for double" or "typeinfo for char const*" name it
/// (pybind11 compares argument types with typeid).
[[nodiscard]] inline bool fundamental_type(std::string_view name) {
  constexpr std::string_view words[] = {
      "void",     "bool",     "char",     "signed",     "unsigned",          "short",
      "int",      "long",     "float",    "double",     "wchar_t",           "char8_t",
      "char16_t", "char32_t", "__int128", "__float128", "decltype(nullptr)", "_Float16",
      "const",    "volatile"};
  bool any = false;
  std::size_t at = 0;
  while (at < name.size()) {
    if (name[at] == ' ' || name[at] == '*' || name[at] == '&') {
      ++at;
      continue;
    }
    std::size_t end = at;
    while (end < name.size() && name[end] != ' ' && name[end] != '*' && name[end] != '&') ++end;
    if (std::find(std::begin(words), std::end(words), name.substr(at, end - at)) == std::end(words)) return false;
    any = true;
    at = end;
  }
  return any;
}
[[nodiscard]] inline bool compute_or_kernel_namespace(std::string_view name);

/// Refused families, checked before the allowed ones.
inline const std::array<SymbolFamily, 15>& refused_families() {
  static const std::array<SymbolFamily, 15> families{{
      {"threads and sleeping", "starts, schedules or waits on threads, or sleeps",
       "compute in the calling thread (or in GPU kernels on the current stream); forward must finish all its work "
       "before it returns",
       threads},
      {"processes and signals", "starts or controls processes, or handles signals",
       "do all the work in forward, in this process", processes},
      {"files and descriptors", "opens, reads or writes files, descriptors or sockets",
       "keep everything in memory; to report an error, throw (TORCH_CHECK) or print to stderr", files},
      {"dynamic loading", "loads code or looks symbols up at run time",
       "call what you use directly: the compile driver links the libraries the policy allows", dynamic_loading},
      {"the environment", "reads the environment or the process's identity", "take what the kernel needs as arguments",
       environment},
      {"raw system calls and memory protection",
       "makes raw system calls, changes memory protection or jumps between stacks", "use the C++ and CUDA runtimes",
       raw_system},
      {"CUDA host callbacks and driver entry points",
       "runs host code from a stream or looks driver functions up by name",
       "launch kernels on the current stream; use the CUDA runtime API", cuda_host_callbacks},
      {"device memory of its own",
       "allocates device or pinned memory outside torch's caching allocator, which outlives the call (a place to "
       "keep earlier inputs and their results)",
       "allocate with torch inside forward (torch::empty, at::empty_like): the memory then comes and goes with the "
       "call",
       device_memory_of_its_own},
      {"device-wide CUDA state",
       "changes the device's state beyond this call (persisting L2 windows, limits, resets, IPC)",
       "leave the device's configuration alone", cuda_device_state},
      {"torch operators called past the dispatcher's keys",
       "redispatches a torch operator, skipping the keys (the evaluation's among them) above the one given",
       "write the computation as your own kernels",
       {},
       SymbolFamilyCondition::always,
       redispatched_torch_operator},
      {"torch's dispatcher and its mode stack",
       "looks torch operators up by name, registers kernels, or changes which dispatch keys and modes are active",
       "call your own kernels; torch may only create, view and copy tensors", dispatcher},
      {"torch's global settings",
       "changes process-wide torch settings (backends, precision, allocator, seeds, threads)",
       "leave torch's settings as they are", global_settings},
      {"state kept in the C and C++ libraries",
       "keeps state for the process in the libraries (the C random generators, the words of the standard streams, "
       "the global locale), which carries from one call to the next",
       "a kernel's result depends only on its inputs: take what it needs as arguments", library_state},
      {"Python code and the interpreter",
       "runs Python code, imports modules, or reaches the interpreter's frames and state",
       "the extension only computes: do the work in C++ or CUDA", python_code},
      {"torch compute",
       "is torch's own computation (an operator that computes, or a kernel namespace such as at::cpu, at::native, "
       "at::cuda, torch::nn)",
       "write the computation as your own kernels; torch may only create, view, copy and check tensors",
       torch_namespaces, SymbolFamilyCondition::always, compute_or_kernel_namespace},
  }};
  return families;
}

/// Allowed families.
inline const std::array<SymbolFamily, 12>& allowed_families() {
  static const std::array<SymbolFamily, 12> families{{
      {"C++ runtime",
       "the language runtime: allocation, exceptions, RTTI, static initialization, the standard library (its threads, "
       "files and process functions are refused above) and libgcc's arithmetic helpers; nvcc gives device-only "
       "functions host bodies that call exit",
       {},
       cxx_runtime},
      {"C++ runtime",
       "the run-time type information of fundamental types",
       {},
       {},
       SymbolFamilyCondition::always,
       fundamental_type},
      {"C library",
       "memory, strings, number conversions, formatted output to stdout and stderr, clocks, and locks that start no "
       "thread",
       {},
       c_library},
      {"C math library", "libm's functions in every precision", {}, {}, SymbolFamilyCondition::always, accepts_math},
      {"CUDA runtime",
       "allocation, copies, streams, events, graphs, kernel launches and their registration (host callbacks, driver "
       "entry points and device-wide state are refused above)",
       {},
       cuda_runtime},
      {"cuBLAS",
       "GEMM and batched GEMM, where the task multiplies matrices",
       {},
       cublas,
       SymbolFamilyCondition::cublas},
      {"cuDNN", "convolutions, where the task convolves", {}, cudnn, SymbolFamilyCondition::cudnn},
      {"Python bindings",
       "what pybind11's generated code and torch's tensor casters call: object and type bookkeeping, argument "
       "conversion, errors, the GIL; pybind11's module setup calls attributes and builtins through PyObject_CallObject "
       "and PyEval_GetBuiltins",
       {},
       python_binding},
      {"torch tensor operators",
       "creation, copies, conversions, views and metadata through the dispatcher (the operators the forward guard "
       "allows)",
       {},
       {},
       SymbolFamilyCondition::always,
       allowed_torch_operator},
      {"torch tensors",
       "tensor and storage objects, their metadata, data pointers, options and dtypes; the autograd metadata and "
       "dispatch-key guard torch's factory functions set up",
       {},
       tensors},
      {"torch checks", "TORCH_CHECK and friends: errors, warnings, source locations", {}, checks},
      {"torch CUDA context",
       "streams, guards, events, devices, properties, the caching allocator and CUDA graphs",
       {},
       cuda_context},
  }};
  return families;
}

[[nodiscard]] inline bool matches(std::string_view pattern, std::string_view name) {
  if (!pattern.empty() && pattern.back() == '*')
    return name.substr(0, pattern.size() - 1) == pattern.substr(0, pattern.size() - 1);
  return name == pattern;
}

/// The index of the first of `family`'s patterns `qualified` matches (0 for a family of
/// predicates alone), or -1 when it is not in the family.
[[nodiscard]] inline int family_rank(const SymbolFamily& family, std::string_view qualified) {
  if (family.accepts && !family.accepts(qualified)) return -1;
  if (family.patterns.empty()) return 0;
  for (std::size_t i = 0; i < family.patterns.size(); ++i)
    if (matches(family.patterns[i], qualified)) return static_cast<int>(i);
  return -1;
}

[[nodiscard]] inline bool in_family(const SymbolFamily& family, std::string_view qualified) {
  return family_rank(family, qualified) >= 0;
}

/// The kernel namespaces and computing operators, but not what an allowed family claims
/// inside them (at::cuda's streams, at::native::getCudnnHandle, at::_ops' views).
[[nodiscard]] inline bool compute_or_kernel_namespace(std::string_view name) {
  if (name.substr(0, 10) == "at::_ops::") return compute_torch_operator(name);
  for (const SymbolFamily& family : allowed_families())
    if (family.condition == SymbolFamilyCondition::always || family.name == "cuBLAS" || family.name == "cuDNN")
      if (family.accepts == nullptr && in_family(family, name)) return false;
  return true;
}

// ---- demangled names ----------------------------------------------------------------------

/// The Itanium-ABI demangling of `symbol`, or `symbol` itself (C names, failures).
[[nodiscard]] inline std::string demangle(const std::string& symbol) {
  if (symbol.size() < 2 || symbol[0] != '_' || symbol[1] != 'Z') return symbol;
  int status = 0;
  char* text = abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status);
  if (status != 0 || text == nullptr) {
    std::free(text);
    return symbol;
  }
  std::string result(text);
  std::free(text);
  return result;
}

/// The entity a demangled name denotes, without what a name cannot be matched by: the
/// special-name prefix ("vtable for "), the return type of a function template, the
/// parameters and qualifiers. "float* at::TensorBase::data_ptr<float>() const" gives
/// "at::TensorBase::data_ptr<float>"; "vtable for std::bad_alloc" gives "std::bad_alloc".
[[nodiscard]] inline std::string qualified_name(std::string_view demangled) {
  for (std::string_view prefix :
       {"vtable for ", "VTT for ", "typeinfo for ", "typeinfo name for ", "construction vtable for ",
        "guard variable for ", "TLS init function for ", "TLS wrapper function for ", "non-virtual thunk to ",
        "virtual thunk to ", "covariant return thunk to ", "reference temporary #"})
    if (demangled.substr(0, prefix.size()) == prefix) {
      demangled.remove_prefix(prefix.size());
      if (prefix == "reference temporary #") {
        const std::size_t for_ = demangled.find(" for ");
        if (for_ != std::string_view::npos) demangled.remove_prefix(for_ + 5);
      }
      if (prefix == "construction vtable for ") {
        const std::size_t in = demangled.find("-in-");
        if (in != std::string_view::npos) demangled = demangled.substr(0, in);
      }
    }
  // Find the parameter list: the first '(' outside template arguments, braces and the
  // "(anonymous namespace)" parts of a name; remember where top-level words start.
  int depth = 0;
  std::size_t word = 0, end = demangled.size();
  for (std::size_t i = 0; i < demangled.size(); ++i) {
    const char c = demangled[i];
    if (demangled.compare(i, 21, "(anonymous namespace)") == 0) {
      i += 20;
      continue;
    }
    if (demangled.compare(i, 8, "operator") == 0 &&
        (i == 0 || !(std::isalnum(static_cast<unsigned char>(demangled[i - 1])) || demangled[i - 1] == '_'))) {
      std::size_t j = i + 8;
      if (demangled.compare(j, 2, "()") == 0) {
        j += 2;
      } else if (j < demangled.size() &&
                 std::string_view("<>=!+-*/%^&|~[],").find(demangled[j]) != std::string_view::npos) {
        while (j < demangled.size() &&
               std::string_view("<>=!+-*/%^&|~[],").find(demangled[j]) != std::string_view::npos)
          ++j;
        // "operator<< <std::char_traits<char> >": the template arguments follow a space.
        if (j + 1 < demangled.size() && demangled[j] == ' ' && demangled[j + 1] == '<') ++j;
      } else {
        // "operator new", "operator delete[]", a conversion to a type: the name runs to '('.
        int inner = 0;
        while (j < demangled.size() && !(demangled[j] == '(' && inner == 0)) {
          if (demangled[j] == '<') ++inner;
          if (demangled[j] == '>') --inner;
          ++j;
        }
      }
      i = j - 1;
      continue;
    }
    if (c == '<' || c == '{' || c == '[')
      ++depth;
    else if (c == '>' || c == '}' || c == ']')
      --depth;
    else if (depth == 0 && c == '(') {
      end = i;
      break;
    } else if (depth == 0 && c == ' ') {
      word = i + 1;
    }
  }
  // The return type of a template function comes first; operators' own words ("operator
  // new") were stepped over above, so the last top-level word is the name.
  std::string_view name = demangled.substr(0, end);
  if (word < name.size()) name = name.substr(word);
  while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
  return std::string(name);
}

}  // namespace detail::link

/// One symbol the link policy refuses.
struct ForbiddenSymbol {
  /// As linked (mangled for C++).
  std::string symbol;
  /// Readable, without the version.
  std::string demangled;
  /// "GLIBC_2.2.5", where the symbol is versioned.
  std::string version;
  /// The refused family it belongs to, or "not on the allowlist".
  std::string family;
  std::string why;
  std::string instead;
  /// Which of the family's patterns it matched first: the lower, the more telling (a
  /// family lists its entry points before the helpers they pull in).
  int rank = 0;
};

inline void to_json(nlohmann::json& out, const ForbiddenSymbol& symbol) {
  out = {{"symbol", symbol.symbol}, {"demangled", symbol.demangled}, {"family", symbol.family}, {"why", symbol.why}};
  if (!symbol.version.empty()) out["version"] = symbol.version;
  if (!symbol.instead.empty()) out["instead"] = symbol.instead;
}

/// What the link check found in one module.
struct LinkCheckResult {
  std::vector<ForbiddenSymbol> forbidden;
  /// Libraries the module names in DT_NEEDED outside the toolchain's own.
  std::vector<std::string> foreign_libraries;
  std::size_t undefined_symbols = 0;
  std::vector<std::string> needed;
  std::chrono::microseconds duration{0};

  [[nodiscard]] bool passed() const noexcept { return forbidden.empty() && foreign_libraries.empty(); }
};

/// Which family, allowed or refused, a symbol belongs to under `policy`.
struct SymbolVerdict {
  bool allowed = false;
  std::string family;
  std::string why;
  std::string instead;
  int rank = 0;
};

/// The refused family `qualified` belongs to, if any.
[[nodiscard]] inline std::optional<SymbolVerdict> refused_family_of(std::string_view qualified) {
  for (const SymbolFamily& family : detail::link::refused_families())
    if (const int rank = detail::link::family_rank(family, qualified); rank >= 0)
      return SymbolVerdict{false, std::string(family.name), std::string(family.why), std::string(family.instead), rank};
  return std::nullopt;
}

[[nodiscard]] inline SymbolVerdict judge_symbol(const std::string& symbol, const LibraryPolicy& policy) {
  const std::string qualified = detail::link::qualified_name(detail::link::demangle(symbol));
  if (std::optional<SymbolVerdict> refused = refused_family_of(qualified)) return std::move(*refused);
  for (const SymbolFamily& family : detail::link::allowed_families()) {
    if (!detail::link::in_family(family, qualified)) continue;
    if (family.condition == SymbolFamilyCondition::cublas && !policy.cublas)
      return {false, "cuBLAS",
              "calls cuBLAS, which this task's library policy does not allow (the reference multiplies no matrices)",
              "write the computation as your own kernels"};
    if (family.condition == SymbolFamilyCondition::cudnn && !policy.cudnn)
      return {false, "cuDNN",
              "calls cuDNN, which this task's library policy does not allow (the reference does not convolve)",
              "write the computation as your own kernels"};
    return {true, std::string(family.name), std::string(family.why), {}};
  }
  return {false, "not on the allowlist",
          "is none of what an extension may link: the C++ and C runtimes, the CUDA runtime, the libraries the policy "
          "allows, torch's tensor creation, views, metadata and checks, and the Python binding",
          "compute in your own kernels and use torch only to create, view and check tensors"};
}

/// Libraries a module built by the compile driver names: the toolchain's, torch's, the
/// CUDA runtime's and the vendor libraries (what it may call of them is the symbols').
inline constexpr std::string_view toolchain_libraries[] = {
    "libc10.so",    "libc10_cuda.so", "libtorch.so",    "libtorch_cpu.so", "libtorch_cuda.so", "libtorch_python.so",
    "libcudart.so", "libcublas.so",   "libcublasLt.so", "libcudnn.so",     "libstdc++.so",     "libm.so",
    "libgcc_s.so",  "libc.so",        "ld-linux",       "libpython"};

/// Checks every undefined symbol of `table` against the families under `policy`.
[[nodiscard]] inline LinkCheckResult check_linked_symbols(const detail::elf::DynamicTable& table,
                                                          const LibraryPolicy& policy) {
  const auto started = std::chrono::steady_clock::now();
  LinkCheckResult result;
  result.undefined_symbols = table.undefined.size();
  result.needed = table.needed;
  for (const detail::elf::DynamicSymbol& symbol : table.undefined) {
    SymbolVerdict verdict = judge_symbol(symbol.name, policy);
    if (verdict.allowed) continue;
    result.forbidden.push_back({symbol.name, detail::link::demangle(symbol.name), symbol.version,
                                std::move(verdict.family), std::move(verdict.why), std::move(verdict.instead),
                                verdict.rank});
  }
  // A C function the module defines under the name of one the policy refuses is a decoy:
  // the dynamic loader binds the module's own calls to the library that is already loaded
  // (torch's OpenMP runtime, the interpreter), so the call escapes the undefined symbols.
  // C++ names are the module's own code and the template instantiations it emits.
  for (const detail::elf::DynamicSymbol& symbol : table.defined) {
    if (symbol.name.rfind("_Z", 0) == 0 || symbol.name.rfind("PyInit_", 0) == 0) continue;
    if (std::optional<SymbolVerdict> refused = refused_family_of(detail::link::qualified_name(symbol.name)))
      result.forbidden.push_back({symbol.name, symbol.name, symbol.version, std::move(refused->family),
                                  "defines " + symbol.name + " itself, under the name of a function that " +
                                      refused->why + " (calls to it reach the loaded library's own)",
                                  std::move(refused->instead), refused->rank});
  }
  for (const std::string& library : table.needed) {
    const bool known = std::any_of(std::begin(toolchain_libraries), std::end(toolchain_libraries),
                                   [&](std::string_view prefix) { return library.rfind(prefix, 0) == 0; });
    if (!known) result.foreign_libraries.push_back(library);
  }
  result.duration = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
  return result;
}

/// Reads and checks the module at `module`. Throws detail::elf::ElfFormatError for a file
/// that is not a well-formed shared object, std::runtime_error when it cannot be read.
[[nodiscard]] inline LinkCheckResult check_module_symbols(const std::filesystem::path& module,
                                                          const LibraryPolicy& policy) {
  const auto started = std::chrono::steady_clock::now();
  std::ifstream stream(module, std::ios::binary);
  if (!stream) throw std::runtime_error("cannot read " + module.string());
  const std::string image{std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
  LinkCheckResult result = check_linked_symbols(detail::elf::read_dynamic_table(image), policy);
  result.duration = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
  return result;
}

/// The rejection for a failed check: per refused family, the symbols (up to `shown` of
/// each), what the family would do and what to do instead; nothing when the check passed.
[[nodiscard]] inline std::optional<Rejection> link_rejection(const LinkCheckResult& check, std::size_t shown = 4) {
  if (check.passed()) return std::nullopt;
  std::string message = "the extension links ";
  if (!check.forbidden.empty()) {
    message += std::to_string(check.forbidden.size()) + " symbol" + (check.forbidden.size() == 1 ? "" : "s") +
               " outside the contract's allowlist:";
    // One entry per family, in the order the families were first met.
    std::vector<std::string> families;
    for (const ForbiddenSymbol& each : check.forbidden)
      if (std::find(families.begin(), families.end(), each.family) == families.end()) families.push_back(each.family);
    for (std::size_t f = 0; f < families.size(); ++f) {
      std::vector<const ForbiddenSymbol*> members;
      for (const ForbiddenSymbol& each : check.forbidden)
        if (each.family == families[f]) members.push_back(&each);
      std::sort(members.begin(), members.end(), [](const ForbiddenSymbol* a, const ForbiddenSymbol* b) {
        return a->rank != b->rank ? a->rank < b->rank : a->demangled < b->demangled;
      });
      message += (f ? "; " : " ") + families[f] + " (";
      for (std::size_t i = 0; i < members.size() && i < shown; ++i) message += (i ? ", " : "") + members[i]->demangled;
      if (members.size() > shown) message += ", and " + std::to_string(members.size() - shown) + " more";
      message += "): " + members.front()->why;
      if (!members.front()->instead.empty()) message += "; instead, " + members.front()->instead;
    }
  }
  if (!check.foreign_libraries.empty()) {
    message +=
        std::string(check.forbidden.empty() ? "" : ". It also names ") + "libraries the compile driver does not link:";
    for (const std::string& library : check.foreign_libraries) message += " " + library;
  }
  message += ". The check reads what the compiled module calls, however the source spells it.";
  nlohmann::json details = {{"stage", "link_check"},
                            {"forbidden_symbols", check.forbidden},
                            {"foreign_libraries", check.foreign_libraries},
                            {"undefined_symbols", check.undefined_symbols},
                            {"duration_ms", static_cast<double>(check.duration.count()) / 1000.0}};
  return Rejection{RejectionReason::forbidden_symbol, std::move(message), std::move(details)};
}

}  // namespace cuda_agent

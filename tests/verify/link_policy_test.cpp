// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include <algorithm>   // any_of, find_if
#include <filesystem>  // path
#include <fstream>     // ifstream, ofstream
#include <iterator>    // istreambuf_iterator
#include <string>      // string
#include <utility>     // pair
#include <vector>      // vector

#include "cuda_agent/process.hpp"
#include "cuda_agent/verify/link_policy.hpp"
#include "verify/verify_support.hpp"

namespace ca = cuda_agent;
namespace elf = cuda_agent::detail::elf;

namespace {

ca::LibraryPolicy all_libraries() { return ca::LibraryPolicy{}.for_task(true, true); }

elf::DynamicTable table_of(const std::vector<std::string>& names) {
  elf::DynamicTable table;
  for (const std::string& name : names)
    table.undefined.push_back({name, elf::SymbolBinding::global, elf::SymbolType::function, "", ""});
  table.needed = {"libc10.so", "libtorch.so", "libstdc++.so.6", "libc.so.6"};
  return table;
}

/// The symbols of each allowed family a binding links, as compilers emit them (taken from
/// the undefined symbols of the repository's legitimate CPU and CUDA extensions).
const std::vector<std::pair<std::string, std::vector<std::string>>>& allowed_examples() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> examples{
      {"C++ runtime",
       {"_Znwm", "_ZdlPvm", "__cxa_throw", "__cxa_guard_acquire", "__gxx_personality_v0", "_Unwind_Resume",
        "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE9_M_createERmm", "_ZTVN10__cxxabiv117__class_type_infoE",
        "_ZNSo9_M_insertIlEERSoT_", "_ZSt20__throw_length_errorPKc", "_ZTISt13runtime_error", "__cxa_atexit", "exit",
        "__tls_get_addr", "__gmon_start__", "__popcountdi2"}},
      {"C library",
       {"memcpy", "memset", "strlen", "malloc", "free", "fprintf", "stderr", "snprintf", "pthread_mutex_lock",
        "clock_gettime", "__errno_location"}},
      {"C math library", {"expf", "sqrt", "tanhf", "__exp_finite", "erff", "fmaf", "sincosf"}},
      {"CUDA runtime",
       {"cudaMemsetAsync", "cudaMemcpyAsync", "cudaLaunchKernel", "cudaGetLastError", "cudaEventRecord",
        "cudaStreamWaitEvent", "__cudaRegisterFatBinary", "__cudaPushCallConfiguration", "cudaFuncSetAttribute",
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor"}},
      {"cuBLAS", {"cublasSgemm_v2", "cublasSetStream_v2", "cublasLtMatmul", "_ZN2at4cuda24getCurrentCUDABlasHandleEv"}},
      {"cuDNN", {"cudnnConvolutionForward", "cudnnCreateTensorDescriptor", "_ZN2at6native14getCudnnHandleEv"}},
      {"Python bindings",
       {"PyTuple_New", "PyErr_SetString", "PyObject_GetAttrString", "PyObject_CallObject", "PyEval_GetBuiltins",
        "PyGILState_Ensure", "_Py_NoneStruct", "PyFrozenSet_Type",
        "_ZN8pybind116detail11type_casterIN2at6TensorEvE4loadENS_6handleEb"}},
      {"torch tensor operators",
       {"_ZN2at4_ops10empty_like4callERKNS_6TensorESt8optionalIN3c1010ScalarTypeEES5_INS6_6LayoutEES5_INS6_6DeviceEES5_"
        "IbES5_INS6_12MemoryFormatEE",
        "_ZN2at4_ops5zeros4callEN3c108ArrayRefINS2_6SymIntEEESt8optionalINS2_10ScalarTypeEES6_INS2_6LayoutEES6_INS2_"
        "6DeviceEES6_IbE",
        "_ZN2at4_ops4view4callERKNS_6TensorEN3c108ArrayRefINS5_6SymIntEEE",
        "_ZN2at4_ops5copy_4callERNS_6TensorERKS2_b"}},
      {"torch tensors",
       {"_ZNK2at10TensorBase8data_ptrIfEEPT_v", "_ZNK3c1010TensorImpl15decref_pyobjectEv",
        "_ZN3c1010TensorImpl17set_autograd_metaESt10unique_ptrINS_21AutogradMetaInterfaceESt14default_"
        "deleteIS2_EE",
        "_ZN3c104impl23ExcludeDispatchKeyGuardC1ENS_14DispatchKeySetE", "_ZTVN5torch8autograd12AutogradMetaE",
        "_ZN6caffe28TypeMeta13typeMetaDatasEv", "_ZNK2at10TensorBase21__dispatch_contiguousEN3c1012MemoryFormatE"}},
      {"torch checks",
       {"_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
        "_ZN3c106detail23torchInternalAssertFailEPKcS2_jS2_S2_", "_ZN3c104warnERKNS_7WarningE"}},
      {"torch CUDA context",
       {"_ZN3c104cuda20getCurrentCUDAStreamEa", "_ZN3c104cuda17getStreamFromPoolEba",
        "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb", "_ZN3c104cuda9SetDeviceEab",
        "_ZN2at4cuda26getCurrentDevicePropertiesEv", "_ZN3c104cuda20CUDACachingAllocator9allocatorE"}},
  };
  return examples;
}

/// Symbols of each refused family, with the family the check must name.
const std::vector<std::pair<std::string, std::vector<std::string>>>& refused_examples() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> examples{
      {"threads and sleeping",
       {"pthread_create", "pthread_detach",
        "_ZNSt6thread15_M_start_threadESt10unique_ptrINS_6_StateESt14default_"
        "deleteIS1_EEPFvvE",
        "_ZNSt6thread6detachEv", "GOMP_parallel", "omp_get_num_threads", "_ZN2at6launchESt8functionIFvvEE", "nanosleep",
        "clone"}},
      {"processes and signals", {"fork", "execve", "execvp", "system", "popen", "posix_spawn", "kill", "_exit"}},
      {"files and descriptors",
       {"open", "openat", "fopen", "write", "read", "mmap", "socket", "connect", "fdopen",
        "_ZNSt10filesystem4pathC1ERKS0_", "_ZNSt13basic_filebufIcSt11char_traitsIcEE4openEPKcSt13_Ios_Openmode"}},
      {"dynamic loading", {"dlopen", "dlsym", "dlvsym", "dl_iterate_phdr", "dladdr"}},
      {"the environment", {"getenv", "secure_getenv", "setenv", "environ", "getpid"}},
      {"raw system calls and memory protection", {"syscall", "mprotect", "process_vm_writev", "ptrace", "longjmp"}},
      {"CUDA host callbacks and driver entry points",
       {"cudaLaunchHostFunc", "cudaStreamAddCallback", "cudaGetDriverEntryPoint", "cudaGetDriverEntryPointByVersion",
        "cuGetProcAddress_v2", "cudaGraphAddHostNode"}},
      {"device memory of its own",
       {"cudaMalloc", "cudaMallocManaged", "cudaMallocHost", "cudaHostAlloc", "cudaMallocAsync",
        "cudaMallocFromPoolAsync", "cuMemAlloc_v2", "cuMemCreate"}},
      {"device-wide CUDA state",
       {"cudaDeviceReset", "cudaDeviceSetLimit", "cudaCtxResetPersistingL2Cache", "cudaStreamSetAttribute",
        "cudaIpcOpenMemHandle"}},
      {"torch operators called past the dispatcher's keys",
       {"_ZN2at4_ops4relu10redispatchEN3c1014DispatchKeySetERKNS_6TensorE",
        "_ZN2at4_ops10empty_like10redispatchEN3c1014DispatchKeySetERKNS_6TensorESt8optionalINS2_10ScalarTypeEES6_INS2_"
        "6LayoutEES6_INS2_6DeviceEES6_IbES6_INS2_12MemoryFormatEE"}},
      {"torch's dispatcher and its mode stack",
       {"_ZN3c1010Dispatcher17findSchemaOrThrowEPKcS2_",
        "_ZN3c104impl29tls_set_dispatch_key_excludedENS_11DispatchKeyEb",
        "_ZN3c104impl20TorchDispatchModeTLS9pop_stackEv", "_ZN3c104impl26raw_local_dispatch_key_setE",
        "_ZN3c1016parseDispatchKeyERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"}},
      {"torch's global settings", {"_ZN2at13globalContextEv"}},
      {"state kept in the C and C++ libraries",
       {"rand", "srand", "random", "drand48", "setlocale", "_ZNSt8ios_base6xallocEv",
        "_ZNSt8ios_base13_M_grow_wordsEib", "_ZNSt6locale6globalERKS_"}},
      {"Python code and the interpreter",
       {"PyRun_String", "PyRun_SimpleStringFlags", "PyImport_ImportModule", "PyEval_EvalCode", "Py_CompileString",
        "PyObject_Call", "PyObject_CallMethod", "PyObject_Vectorcall", "PySys_GetObject", "PyEval_GetFrame"}},
      {"torch compute",
       {"_ZN2at4_ops2mm4callERKNS_6TensorES4_", "_ZN2at3cpu4reluERKNS_6TensorE", "_ZN2at6native4reluERKNS_6TensorE",
        "_ZN2at4cuda4reluERKNS_6TensorE", "_ZNK2at6Tensor5relu_Ev"}},
  };
  return examples;
}

}  // namespace

TEST_CASE("qualified names drop return types, parameters and special-name prefixes", "[verify][link]") {
  using ca::detail::link::qualified_name;
  CHECK(qualified_name("float* at::TensorBase::data_ptr<float>() const") == "at::TensorBase::data_ptr<float>");
  CHECK(qualified_name(
            "std::remove_const<bool const>::type const* at::TensorBase::const_data_ptr<bool const, 0>() const") ==
        "at::TensorBase::const_data_ptr<bool const, 0>");
  CHECK(qualified_name("vtable for std::bad_alloc") == "std::bad_alloc");
  CHECK(qualified_name("TLS init function for c10::impl::raw_local_dispatch_key_set") ==
        "c10::impl::raw_local_dispatch_key_set");
  CHECK(qualified_name("operator delete(void*, unsigned long)") == "operator delete");
  CHECK(qualified_name("c10::operator<<(std::ostream&, c10::Device const&)") == "c10::operator<<");
  CHECK(qualified_name("std::basic_ostream<char, std::char_traits<char> >& std::operator<< <std::char_traits<char> >("
                       "std::basic_ostream<char, std::char_traits<char> >&, char const*)") ==
        "std::operator<< <std::char_traits<char> >");
  CHECK(qualified_name("(anonymous namespace)::block_combine(int)") == "(anonymous namespace)::block_combine");
  CHECK(qualified_name("memcpy") == "memcpy");
  CHECK(ca::detail::link::demangle("_ZN2at3cpu4reluERKNS_6TensorE") == "at::cpu::relu(at::Tensor const&)");
  CHECK(ca::detail::link::demangle("_Znotmangled") == "_Znotmangled");
}

TEST_CASE("every allowed family passes the link check", "[verify][link]") {
  std::vector<std::string> all;
  for (const auto& [family, symbols] : allowed_examples()) {
    for (const std::string& symbol : symbols) {
      const ca::SymbolVerdict verdict = ca::judge_symbol(symbol, all_libraries());
      INFO(symbol << " -> " << verdict.family << ": " << verdict.why);
      CHECK(verdict.allowed);
      CHECK(verdict.family == family);
      all.push_back(symbol);
    }
  }
  const ca::LinkCheckResult check = ca::check_linked_symbols(table_of(all), all_libraries());
  CHECK(check.passed());
  CHECK(check.undefined_symbols == all.size());
  CHECK_FALSE(ca::link_rejection(check).has_value());
  // Fast: a binding links a few hundred symbols.
  CHECK(check.duration.count() < 50'000);
}

TEST_CASE("each refused family is refused by name, with what to do instead", "[verify][link]") {
  for (const auto& [family, symbols] : refused_examples()) {
    for (const std::string& symbol : symbols) {
      const ca::SymbolVerdict verdict = ca::judge_symbol(symbol, all_libraries());
      INFO(symbol << " -> " << (verdict.allowed ? "allowed" : "refused") << " as " << verdict.family);
      CHECK_FALSE(verdict.allowed);
      CHECK(verdict.family == family);
      CHECK_FALSE(verdict.instead.empty());
    }
    const ca::LinkCheckResult check = ca::check_linked_symbols(table_of(symbols), all_libraries());
    REQUIRE(check.forbidden.size() == symbols.size());
    const auto rejection = ca::link_rejection(check);
    REQUIRE(rejection.has_value());
    CHECK(rejection->reason == ca::RejectionReason::forbidden_symbol);
    CHECK_THAT(rejection->message, Catch::Matchers::Contains(family));
    CHECK_THAT(rejection->message, Catch::Matchers::Contains("instead"));
    CHECK(rejection->details["forbidden_symbols"].size() == symbols.size());
  }
  // Unknown names are refused too: the list says what is allowed, not what is not.
  const ca::SymbolVerdict unknown = ca::judge_symbol("_ZN7private6helperEv", all_libraries());
  CHECK_FALSE(unknown.allowed);
  CHECK(unknown.family == "not on the allowlist");
}

TEST_CASE("cuBLAS and cuDNN follow the task's library policy", "[verify][link]") {
  const ca::LibraryPolicy elementwise = ca::LibraryPolicy{}.for_task(false, false);
  const ca::LibraryPolicy products = ca::LibraryPolicy{}.for_task(true, false);
  const ca::LibraryPolicy convolutions = ca::LibraryPolicy{}.for_task(false, true);
  CHECK_FALSE(elementwise.cublas);
  CHECK_FALSE(elementwise.cudnn);
  CHECK(products.cublas);
  CHECK_FALSE(products.cudnn);
  CHECK(convolutions.cublas);  // im2col makes a convolution a product
  CHECK(convolutions.cudnn);
  for (const char* symbol :
       {"cublasSgemm_v2", "cublasSaxpy_v2", "cublasScopy_v2", "_ZN2at4cuda24getCurrentCUDABlasHandleEv"}) {
    INFO(symbol);
    CHECK(ca::judge_symbol(symbol, products).allowed);
    const ca::SymbolVerdict refused = ca::judge_symbol(symbol, elementwise);
    CHECK_FALSE(refused.allowed);
    CHECK(refused.family == "cuBLAS");
  }
  CHECK_FALSE(ca::judge_symbol("cudnnConvolutionForward", products).allowed);
  CHECK(ca::judge_symbol("cudnnConvolutionForward", convolutions).allowed);

  // The host can fix the policy whatever the task, or only narrow what is derived.
  ca::LibraryPolicy fixed;
  fixed.derive_from_reference = false;
  CHECK(fixed.for_task(false, false).cublas);
  ca::LibraryPolicy no_cublas;
  no_cublas.cublas = false;
  CHECK_FALSE(no_cublas.for_task(true, true).cublas);
  CHECK(no_cublas.for_task(true, true).cudnn);
  CHECK_FALSE(products.intersection(no_cublas).cublas);
  nlohmann::json json = fixed;
  CHECK(json.get<ca::LibraryPolicy>() == fixed);
}

TEST_CASE("libraries the compile driver never links are refused", "[verify][link]") {
  elf::DynamicTable table = table_of({"memcpy"});
  table.needed.push_back("libcuda.so.1");
  const ca::LinkCheckResult check = ca::check_linked_symbols(table, all_libraries());
  CHECK_FALSE(check.passed());
  REQUIRE(check.foreign_libraries.size() == 1);
  CHECK_THAT(ca::link_rejection(check)->message, Catch::Matchers::Contains("libcuda.so.1"));
}

TEST_CASE("a C function the module defines under a refused name is refused; its own C++ code is not",
          "[verify][link]") {
  // Defined, a GOMP_parallel of the module's own is a decoy: its calls bind to the OpenMP
  // runtime torch loaded. Weak instantiations of torch's inline C++ are ordinary.
  elf::DynamicTable table = table_of({"memcpy"});
  table.defined.push_back({"PyInit_cuda_extension", elf::SymbolBinding::global, elf::SymbolType::function, "", ""});
  table.defined.push_back({"_ZN3c1011SymNodeImpl3negEv", elf::SymbolBinding::weak, elf::SymbolType::function, "", ""});
  CHECK(ca::check_linked_symbols(table, all_libraries()).passed());
  table.defined.push_back({"GOMP_parallel", elf::SymbolBinding::weak, elf::SymbolType::function, "", ""});
  const ca::LinkCheckResult check = ca::check_linked_symbols(table, all_libraries());
  REQUIRE(check.forbidden.size() == 1);
  CHECK(check.forbidden.front().symbol == "GOMP_parallel");
  CHECK(check.forbidden.front().family == "threads and sleeping");
  CHECK_THAT(ca::link_rejection(check)->message, Catch::Matchers::Contains("defines GOMP_parallel itself"));
}

// A real module, compiled here: one function per refused family, each declared and
// reached the way the sources of an exploit would (a call, a function's address).
TEST_CASE("a compiled module is judged by what it links, however the source names it", "[verify][link]") {
  const auto compiler = ca::find_program("g++", ca::Environment::from_current({"PATH"}));
  if (!compiler) CUDA_AGENT_SKIP("no g++ on PATH");
  ca::testing::ScratchDirectory scratch("link-policy");
  const std::filesystem::path source = scratch.path() / "module.cpp";
  const std::filesystem::path module = scratch.path() / "module.so";
  std::ofstream(source) << R"(
#include <cmath>
#include <cstring>
#include <string>
extern "C" {
int pthread_create(void*, const void*, void* (*)(void*), void*);
char* getenv(const char*);
void* dlsym(void*, const char*);
long syscall(long, ...);
int PyRun_SimpleString(const char*);
int cudaLaunchHostFunc(void*, void (*)(void*), void*);
}
namespace at { namespace cpu { int relu(int); } }
namespace aten = at;
using namespace at;
void* addresses[] = {reinterpret_cast<void*>(&pthread_create), reinterpret_cast<void*>(&PyRun_SimpleString)};
extern "C" float compute(float x, const char* text) {
  std::string copy(text);
  float y = std::exp(x) + static_cast<float>(std::strlen(copy.c_str()));
  if (getenv("X")) y += 1;
  if (dlsym(nullptr, "y")) y += 1;
  y += static_cast<float>(syscall(39));
  y += static_cast<float>(cudaLaunchHostFunc(nullptr, nullptr, nullptr));
  y += static_cast<float>(cpu::relu(1) + aten::cpu::relu(2));
  return y;
}
)";
  ca::ProcessSpec compile;
  compile.argv = {compiler->string(), "-std=c++17", "-O1", "-fPIC", "-shared", source.string(), "-o", module.string()};
  compile.environment = ca::Environment::inherit_all();
  compile.timeout = std::chrono::minutes(2);
  const ca::ProcessResult built = ca::run_process(compile);
  INFO(built.standard_output.text << built.standard_error.text);
  REQUIRE(built.succeeded());
  const ca::LinkCheckResult check = ca::check_module_symbols(module, all_libraries());
  std::vector<std::string> refused;
  for (const ca::ForbiddenSymbol& each : check.forbidden) refused.push_back(each.demangled);
  INFO(nlohmann::json(check.forbidden).dump(1));
  for (const char* expected : {"pthread_create", "getenv", "dlsym", "syscall", "PyRun_SimpleString",
                               "cudaLaunchHostFunc", "at::cpu::relu(int)"})
    CHECK(std::find(refused.begin(), refused.end(), expected) != refused.end());
  // The C++ runtime, libc and libm the function also uses are allowed.
  CHECK(check.forbidden.size() == 7);
  CHECK(check.duration.count() < 100'000);
  const auto rejection = ca::link_rejection(check);
  REQUIRE(rejection);
  CHECK_THAT(rejection->message, Catch::Matchers::Contains("at::cpu::relu(int)"));
  CHECK_THAT(rejection->message, Catch::Matchers::Contains("threads and sleeping"));
}

// The verifier derives each task's library policy from its reference, and its link check
// (on by default, whatever the static checks) stops a module before any of its code runs.
TEST_CASE("the verifier's library policy per task and its link check", "[python][verifier][link]") {
  ca::testing::ScratchDirectory scratch("link-check");
  ca::HarnessOptions options = ca::testing::harness_options("cpu");
  options.work_directory = scratch.path() / "harness";
  ca::HarnessVerifier verifier(options);
  CHECK(verifier.policy().check_linked_symbols);
  CHECK(verifier.policy().libraries.derive_from_reference);

  for (const auto& [task, cublas] : {std::pair{"relu", false}, std::pair{"row_sum", false}, std::pair{"clamp", false},
                                     std::pair{"matmul", true}, std::pair{"linear", true}}) {
    const ca::LibraryPolicy policy = verifier.library_policy(ca::testing::adversarial_task("cpu", task));
    INFO(task);
    CHECK(policy.cublas == cublas);
    CHECK_FALSE(policy.cudnn);
    CHECK_FALSE(policy.derive_from_reference);
  }
  ca::HarnessVerifier fixed_verifier(options);
  fixed_verifier.policy().libraries.derive_from_reference = false;
  CHECK(fixed_verifier.library_policy(ca::testing::adversarial_task("cpu", "relu")).cublas);

  // A candidate whose threads the static checks would name: with them off, the link check
  // refuses it; with the link check off as well, nothing stops it (it computes correctly).
  const auto compiler = ca::testing::test_compiler("cpu", scratch.path());
  const std::filesystem::path exploit = ca::testing::adversarial_directory() / "candidates" / "cpp_thread_by_address";
  std::ifstream model(exploit / "model_new.py");
  const std::string model_new{std::istreambuf_iterator<char>(model), std::istreambuf_iterator<char>()};
  const std::filesystem::path candidate =
      ca::testing::assemble_candidate(scratch.path() / "candidate", model_new, "cpu", exploit / "kernels.cpu");
  ca::detail::make_open_directory(scratch.path() / "build");
  const ca::CompileResult built = compiler->build(candidate, scratch.path() / "build");
  INFO(built.log.substr(0, 4000));
  REQUIRE(built.succeeded);
  const ca::Task relu = ca::testing::adversarial_task("cpu", "relu");
  verifier.policy().static_checks = false;
  const ca::VerificationResult refused = verifier.verify(relu, ca::Candidate{candidate, scratch.path() / "build"});
  REQUIRE(refused.rejection);
  CHECK(refused.rejection->reason == ca::RejectionReason::forbidden_symbol);
  CHECK_THAT(refused.rejection->message, Catch::Matchers::Contains("pthread_create"));
  CHECK(refused.rejection->details["duration_ms"].get<double>() < 100.0);
  verifier.policy().check_linked_symbols = false;
  const ca::VerificationResult unchecked = verifier.verify(relu, ca::Candidate{candidate, scratch.path() / "build"});
  INFO(nlohmann::json(unchecked).dump(2).substr(0, 3000));
  CHECK(unchecked.correct);
}

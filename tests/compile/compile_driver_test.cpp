// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include <cuda_agent/compile/compile_driver.hpp>

#include <algorithm>   // any_of, count_if
#include <chrono>      // steady_clock, seconds
#include <filesystem>  // path, exists
#include <iterator>    // next
#include <map>         // map
#include <string>      // string
#include <thread>      // thread
#include <vector>      // vector

#include <sys/wait.h>  // waitpid
#include <unistd.h>    // fork, _exit, geteuid

#include "compile_test_support.hpp"

namespace ca = cuda_agent;
using ca::testing::describe;
using ca::testing::RecordingSandbox;
using ca::testing::ScratchDirectory;

namespace {

const ca::Diagnostic* find_error(const ca::CompileResult& result) {
  for (const auto& diagnostic : result.diagnostics)
    if (diagnostic.severity == ca::DiagnosticSeverity::error) return &diagnostic;
  return nullptr;
}

bool has_nvcc() { return std::filesystem::exists("/usr/local/cuda/bin/nvcc"); }

}  // namespace

TEST_CASE("a torch CPU extension builds, imports and computes in Python", "[python]") {
  ScratchDirectory scratch("torch-extension");
  ca::testing::write_files(scratch / "candidate", ca::testing::torch_candidate("2.0"));
  RecordingSandbox sandbox;
  ca::CompileDriver driver(sandbox, ca::testing::cpu_options());

  const ca::CompileResult result = driver.build(scratch / "candidate", scratch / "build");
  INFO(describe(result));
  REQUIRE(result.succeeded);
  CHECK(result.module_path == scratch / "build" / ("cuda_extension" + driver.toolchain().extension_suffix));
  CHECK(result.objects_compiled + result.objects_reused == 2);

  const ca::ProcessResult ran = ca::testing::run_python(
      scratch / "build",
      "import torch, cuda_extension\nprint(cuda_extension.scale(torch.tensor([1.5, -2.0])).tolist())");
  INFO(ran.standard_output.text);
  CHECK(ran.succeeded());
  CHECK(ran.standard_output.text.find("[3.0, -4.0]") != std::string::npos);

  // Every compiler and linker call that read candidate code went through the sandbox.
  const auto commands = sandbox.commands();
  REQUIRE(commands.size() >= static_cast<std::size_t>(result.objects_compiled) + 1);
  for (const auto& argv : commands) CHECK(argv.front() == driver.toolchain().cxx.string());
}

TEST_CASE("the precompiled torch headers are built once and then reused, the lighter one for bindings", "[python]") {
  ScratchDirectory scratch("pch");
  RecordingSandbox first_sandbox;
  ca::CompileDriver first(first_sandbox, ca::testing::cpu_options());
  first.prepare(/*with_frontend=*/true);  // builds them if no earlier test (or run) did

  // Builds `candidate` with a second driver (as in another process), which finds the
  // headers ready, and returns the header its torch file was given.
  auto header_of = [&](const std::string& name, std::map<std::string, std::string> candidate, const std::string& tier) {
    candidate["kernels/binding.cpp"] += "// " + ca::testing::fresh_token() + ": not in the object cache\n";
    ca::testing::write_files(scratch / name, candidate);
    RecordingSandbox sandbox;
    ca::CompileDriver driver(sandbox, ca::testing::cpu_options());
    const ca::CompileResult result = driver.build(scratch / name, scratch / (name + "-build"));
    INFO(describe(result));
    REQUIRE(result.succeeded);
    REQUIRE(result.details.contains("precompiled_headers"));
    const nlohmann::json& headers = result.details["precompiled_headers"];
    CHECK(headers.size() == 1);
    REQUIRE(headers.contains(tier));
    CHECK(headers[tier]["built_now"] == false);
    const std::filesystem::path header = headers[tier]["path"].get<std::string>();
    CHECK(std::filesystem::exists(header));
    // gcc says when it cannot use a precompiled header.
    CHECK(result.log.find("not used because") == std::string::npos);
    std::string given;
    for (const auto& argv : sandbox.commands()) {
      const bool binding = std::find(argv.begin(), argv.end(), "kernels/binding.cpp") != argv.end();
      const auto include = std::find(argv.begin(), argv.end(), "-include");
      if (binding) {
        REQUIRE(include != argv.end());
        CHECK(std::find(argv.begin(), argv.end(), "-Winvalid-pch") != argv.end());
        given = *std::next(include);
      }
      // Files that do not include torch are compiled without it.
      if (std::find(argv.begin(), argv.end(), "kernels/scale.cpp") != argv.end()) CHECK(include == argv.end());
    }
    return given;
  };
  const std::string frontend = header_of("extension", ca::testing::torch_candidate("3.0"), "frontend");
  const std::string bindings = header_of("python", ca::testing::torch_candidate("3.5", "torch/python.h"), "bindings");
  CHECK_FALSE(frontend.empty());
  CHECK_FALSE(bindings.empty());
  CHECK(frontend != bindings);
  CHECK(ca::detail::read_file(bindings).find("#include <torch/python.h>") != std::string::npos);
  CHECK(ca::detail::read_file(frontend).find("#include <torch/extension.h>") != std::string::npos);
}

TEST_CASE("changing one file recompiles only that file", "[python]") {
  ScratchDirectory scratch("incremental");
  auto files = ca::testing::plain_candidate(ca::testing::fresh_token());
  files["kernels/extra.cpp"] = "long extra_" + ca::testing::fresh_token() + "() { return 1; }\n";
  ca::testing::write_files(scratch / "candidate", files);
  ca::CompileDriver driver(RecordingSandbox{}, ca::testing::cpu_options());

  const ca::CompileResult first = driver.build(scratch / "candidate", scratch / "build");
  INFO(describe(first));
  REQUIRE(first.succeeded);
  CHECK(first.objects_compiled >= 2);  // ops.cpp and extra.cpp are new; module.cpp may be cached
  CHECK(first.objects_compiled + first.objects_reused == 3);

  // Nothing changed: no compile, no link.
  const ca::CompileResult again = driver.build(scratch / "candidate", scratch / "build");
  REQUIRE(again.succeeded);
  CHECK(again.objects_compiled == 0);
  CHECK(again.objects_reused == 3);
  CHECK(again.details["link"]["skipped"] == true);

  // One .cpp changes: it alone recompiles.
  ca::testing::write_files(scratch / "candidate",
                           {{"kernels/extra.cpp", "long extra_" + ca::testing::fresh_token() + "() { return 2; }\n"}});
  const ca::CompileResult second = driver.build(scratch / "candidate", scratch / "build");
  INFO(describe(second));
  REQUIRE(second.succeeded);
  CHECK(second.objects_compiled == 1);
  CHECK(second.objects_reused == 2);
  CHECK(second.details["link"]["skipped"] == false);

  // A header changes: the file that includes it recompiles (learnt from the depfile),
  // the others do not, and the module computes with the new value.
  const std::string offset = ca::testing::fresh_token();
  ca::testing::write_files(scratch / "candidate",
                           {{"kernels/offset.h", "#pragma once\nconstexpr long kOffset = " + offset + "L;\n"}});
  const ca::CompileResult third = driver.build(scratch / "candidate", scratch / "build");
  INFO(describe(third));
  REQUIRE(third.succeeded);
  CHECK(third.objects_compiled == 1);
  CHECK(third.objects_reused == 2);
  const ca::ProcessResult ran =
      ca::testing::run_python(scratch / "build", "import cuda_extension\nprint(cuda_extension.add(1))");
  INFO(ran.standard_output.text);
  CHECK(ran.standard_output.text.find(std::to_string(std::stoll(offset) + 1)) != std::string::npos);

  // Changing it back finds the earlier object in the cache.
  ca::testing::write_files(scratch / "candidate", files);
  const ca::CompileResult back = driver.build(scratch / "candidate", scratch / "build");
  REQUIRE(back.succeeded);
  CHECK(back.objects_compiled == 0);
  CHECK(back.objects_reused == 3);
}

TEST_CASE("a second workspace reuses the objects of the first", "[python]") {
  ScratchDirectory scratch("shared-cache");
  const auto files = ca::testing::plain_candidate(ca::testing::fresh_token());
  ca::testing::write_files(scratch / "workspace-a", files);
  ca::testing::write_files(scratch / "workspace-b", files);

  ca::CompileDriver first(RecordingSandbox{}, ca::testing::cpu_options());
  const ca::CompileResult a = first.build(scratch / "workspace-a", scratch / "build-a");
  INFO(describe(a));
  REQUIRE(a.succeeded);
  CHECK(a.objects_compiled >= 1);

  RecordingSandbox sandbox;
  ca::CompileDriver second(sandbox, ca::testing::cpu_options());
  const ca::CompileResult b = second.build(scratch / "workspace-b", scratch / "build-b");
  INFO(describe(b));
  REQUIRE(b.succeeded);
  CHECK(b.objects_compiled == 0);
  CHECK(b.objects_reused == 2);
  CHECK(sandbox.commands().size() == 1);  // the link only
  CHECK(ca::detail::read_file(a.module_path) == ca::detail::read_file(b.module_path));
}

TEST_CASE("concurrent builds of the same sources from threads and processes agree", "[python]") {
  ScratchDirectory scratch("concurrent");
  const std::string offset = ca::testing::fresh_token();
  ca::testing::write_files(scratch / "candidate", ca::testing::plain_candidate(offset));
  ca::CompileOptions options = ca::testing::cpu_options();
  {
    // Probe once before forking, so that the children do not all run the probe.
    ca::CompileDriver warm(RecordingSandbox{}, options);
    (void)warm.toolchain();
  }

  constexpr int processes = 2;
  std::vector<pid_t> children;
  for (int i = 0; i < processes; ++i) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      int status = 1;
      try {
        ca::CompileDriver driver(RecordingSandbox{}, options);
        status =
            driver.build(scratch / "candidate", scratch / ("build-process-" + std::to_string(i))).succeeded ? 0 : 1;
      } catch (...) {
        status = 2;
      }
      ::_exit(status);
    }
    children.push_back(child);
  }
  constexpr int threads = 3;
  std::vector<ca::CompileResult> results(threads);
  {
    ca::CompileDriver driver(RecordingSandbox{}, options);
    std::vector<std::thread> workers;
    for (int i = 0; i < threads; ++i)
      workers.emplace_back([&, i] {
        results[i] = driver.build(scratch / "candidate", scratch / ("build-thread-" + std::to_string(i)));
      });
    for (auto& worker : workers) worker.join();
  }
  for (const pid_t child : children) {
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  const std::string reference = ca::detail::read_file(results[0].module_path);
  for (const auto& result : results) {
    INFO(describe(result));
    REQUIRE(result.succeeded);
    CHECK(ca::detail::read_file(result.module_path) == reference);
  }
  for (int i = 0; i < processes; ++i) {
    const auto module = scratch / ("build-process-" + std::to_string(i)) / results[0].module_path.filename();
    CHECK(ca::detail::read_file(module) == reference);
  }
  const ca::ProcessResult ran =
      ca::testing::run_python(scratch / "build-thread-1", "import cuda_extension\nprint(cuda_extension.add(2))");
  CHECK(ran.standard_output.text.find(std::to_string(std::stoll(offset) + 2)) != std::string::npos);

  // No temporary files are left in the cache by the racing writers.
  std::size_t leftovers = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(options.cache_directory / "objects"))
    if (entry.path().filename().string().find(".tmp.") != std::string::npos) ++leftovers;
  CHECK(leftovers == 0);
}

TEST_CASE("compile errors come back located in the candidate's files", "[python]") {
  ScratchDirectory scratch("errors");
  auto files = ca::testing::plain_candidate(ca::testing::fresh_token());
  files["kernels/ops.cpp"] =
      "#include \"ops.h\"\n"
      "#include \"offset.h\"\n"
      "long ops_add(long value) {\n"
      "  return value + undefined_offset;\n"
      "}\n"
      "int no_return() {}\n";
  files["kernels/broken.h"] = "#pragma once\nstruct Broken { int x }; \n";
  files["kernels/user.cpp"] = "#include \"broken.h\"\nint use() { return Broken{}.x; }\n";
  ca::testing::write_files(scratch / "candidate", files);
  ca::CompileDriver driver(RecordingSandbox{}, ca::testing::cpu_options());

  const ca::CompileResult result = driver.build(scratch / "candidate", scratch / "build");
  INFO(describe(result));
  CHECK_FALSE(result.succeeded);
  CHECK_FALSE(result.timed_out);
  CHECK(result.module_path.empty());
  CHECK_FALSE(std::filesystem::exists(scratch / "build" / ("cuda_extension" + driver.toolchain().extension_suffix)));

  auto find = [&](const std::string& file, int line) -> const ca::Diagnostic* {
    for (const auto& diagnostic : result.diagnostics)
      if (diagnostic.file == file && diagnostic.line == line) return &diagnostic;
    return nullptr;
  };
  const ca::Diagnostic* undefined = find("kernels/ops.cpp", 4);
  REQUIRE(undefined != nullptr);
  CHECK(undefined->severity == ca::DiagnosticSeverity::error);
  CHECK(undefined->column == 18);
  CHECK(undefined->message.find("undefined_offset") != std::string::npos);
  const ca::Diagnostic* no_return = find("kernels/ops.cpp", 6);
  REQUIRE(no_return != nullptr);
  CHECK(no_return->severity == ca::DiagnosticSeverity::warning);
  // An error inside a header is reported in the header.
  const ca::Diagnostic* in_header = find("kernels/broken.h", 2);
  REQUIRE(in_header != nullptr);
  CHECK(in_header->severity == ca::DiagnosticSeverity::error);
  CHECK(result.log.find("undefined_offset") != std::string::npos);
}

TEST_CASE("a failed build removes the module an earlier build left", "[python]") {
  ScratchDirectory scratch("stale");
  auto files = ca::testing::plain_candidate(ca::testing::fresh_token());
  ca::testing::write_files(scratch / "candidate", files);
  ca::CompileDriver driver(RecordingSandbox{}, ca::testing::cpu_options());
  const ca::CompileResult good = driver.build(scratch / "candidate", scratch / "build");
  REQUIRE(good.succeeded);
  REQUIRE(std::filesystem::exists(good.module_path));
  ca::testing::write_files(scratch / "candidate", {{"kernels/ops.cpp", "this is not C++\n"}});
  const ca::CompileResult bad = driver.build(scratch / "candidate", scratch / "build");
  CHECK_FALSE(bad.succeeded);
  CHECK_FALSE(std::filesystem::exists(good.module_path));
}

TEST_CASE("a build that runs past its limit is stopped and says so", "[python]") {
  ScratchDirectory scratch("timeout");
  auto files = ca::testing::plain_candidate(ca::testing::fresh_token());
  // Slow without tripping g++'s limit on constant evaluation (33,554,432 operations, about
  // 5 s here): a single longer spin hit that limit, and failed with an error of its own,
  // about when the 3 s limit fired. Each spin stays under it (1.4 s here); sixteen take
  // about 22 s.
  std::string slow =
      "constexpr long long spin(long long seed) {\n"
      "  long long sum = 0;\n"
      "  for (long long i = 0; i < 1000; ++i)\n"
      "    for (long long j = 0; j < 1000; ++j) sum += i ^ j ^ seed;\n"
      "  return sum;\n"
      "}\n";
  for (int seed = 1; seed <= 16; ++seed)
    slow += "static_assert(spin(" + std::to_string(seed) + ") != " + ca::testing::fresh_token() + ", \"spin\");\n";
  files["kernels/slow.cpp"] = slow;
  ca::testing::write_files(scratch / "candidate", files);
  ca::CompileOptions options = ca::testing::cpu_options();
  options.timeout = std::chrono::seconds(3);
  options.jobs = 1;
  ca::CompileDriver driver(RecordingSandbox{}, options);
  (void)driver.toolchain();

  const auto started = std::chrono::steady_clock::now();
  const ca::CompileResult result = driver.build(scratch / "candidate", scratch / "build");
  const auto elapsed = std::chrono::steady_clock::now() - started;
  INFO(describe(result));
  CHECK_FALSE(result.succeeded);
  CHECK(result.timed_out);
  CHECK(elapsed < std::chrono::seconds(30));
  const ca::Diagnostic* error = find_error(result);
  REQUIRE(error != nullptr);
  CHECK(error->message.find("limit") != std::string::npos);
  CHECK(error->file.empty());  // the driver's own message, not the compiler's
}

TEST_CASE("candidate sources are read without following symbolic links", "[python]") {
  ScratchDirectory scratch("links");
  auto files = ca::testing::plain_candidate(ca::testing::fresh_token());
  files["kernels/ops.cpp"] = "#include \"ops.h\"\n#include \"secret.h\"\nlong ops_add(long value) { return value; }\n";
  ca::testing::write_files(scratch / "candidate", files);
  std::filesystem::create_symlink("/etc/passwd", scratch / "candidate" / "kernels" / "secret.h");
  ca::CompileDriver driver(RecordingSandbox{}, ca::testing::cpu_options());

  const ca::CompileResult result = driver.build(scratch / "candidate", scratch / "build");
  INFO(describe(result));
  CHECK_FALSE(result.succeeded);
  const bool reported = std::any_of(result.diagnostics.begin(), result.diagnostics.end(), [](const ca::Diagnostic& d) {
    return d.file == "kernels/secret.h" && d.severity == ca::DiagnosticSeverity::warning &&
           d.message.find("symbolic link") != std::string::npos;
  });
  CHECK(reported);
  CHECK(result.log.find("root:") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(scratch / "build" / "src" / "kernels" / "secret.h"));
}

TEST_CASE("an unprivileged sandbox keeps #include \"/etc/shadow\" out of the log", "[python]") {
  if (::geteuid() != 0) CUDA_AGENT_SKIP("needs root to run the compiler as another user");
  const std::string shadow = ca::detail::read_file("/etc/shadow");
  const std::string first_line = shadow.substr(0, shadow.find('\n'));
  REQUIRE_FALSE(first_line.empty());

  ScratchDirectory scratch("shadow");
  auto files = ca::testing::plain_candidate(ca::testing::fresh_token());
  files["kernels/steal.cpp"] = "#include \"/etc/shadow\"\n";
  ca::testing::write_files(scratch / "candidate", files);
  ca::CompileOptions options = ca::testing::cpu_options();
  options.sandbox_user = ca::UserIdentity{65534, 65534};
  RecordingSandbox sandbox;
  sandbox.drop_to(65534, 65534);
  ca::CompileDriver driver(sandbox, options);

  const ca::CompileResult result = driver.build(scratch / "candidate", scratch / "build");
  INFO(describe(result));
  CHECK_FALSE(result.succeeded);
  CHECK(result.log.find(first_line.substr(0, first_line.find(':') + 2)) == std::string::npos);
  bool denied = false;
  for (const auto& diagnostic : result.diagnostics)
    denied = denied || (diagnostic.file == "kernels/steal.cpp" &&
                        diagnostic.message.find("Permission denied") != std::string::npos);
  CHECK(denied);
}

TEST_CASE("the library policy is enforced on what the extension links against", "[python]") {
  ScratchDirectory scratch("policy");
  auto files = ca::testing::plain_candidate(ca::testing::fresh_token());
  files["kernels/gemm.cpp"] =
      "extern \"C\" int cublasCreate_v2(void** handle);\n"
      "int make_handle() { void* handle = nullptr; return cublasCreate_v2(&handle); }\n";
  ca::testing::write_files(scratch / "candidate", files);

  ca::CompileOptions options = ca::testing::cpu_options();
  options.libraries.cublas = false;
  ca::CompileDriver strict(RecordingSandbox{}, options);
  const ca::CompileResult rejected = strict.build(scratch / "candidate", scratch / "build-strict");
  INFO(describe(rejected));
  CHECK_FALSE(rejected.succeeded);
  const ca::Diagnostic* error = find_error(rejected);
  REQUIRE(error != nullptr);
  CHECK(error->message.find("cuBLAS") != std::string::npos);
  CHECK(error->message.find("cublasCreate_v2") != std::string::npos);
  CHECK_FALSE(
      std::filesystem::exists(scratch / "build-strict" / ("cuda_extension" + strict.toolchain().extension_suffix)));

  // The default policy allows cuBLAS (the symbol resolves through torch at import time).
  ca::CompileDriver permissive(RecordingSandbox{}, ca::testing::cpu_options());
  const ca::CompileResult accepted = permissive.build(scratch / "candidate", scratch / "build-default");
  INFO(describe(accepted));
  CHECK(accepted.succeeded);

  // Loading code at run time is a way around any policy.
  ca::testing::write_files(
      scratch / "candidate",
      {{"kernels/gemm.cpp", "#include <dlfcn.h>\nvoid* open_blas() { return dlopen(\"libcublas.so\", RTLD_NOW); }\n"}});
  const ca::CompileResult loader = permissive.build(scratch / "candidate", scratch / "build-dlopen");
  INFO(describe(loader));
  CHECK_FALSE(loader.succeeded);
  REQUIRE(find_error(loader) != nullptr);
  CHECK(find_error(loader)->message.find("dlopen") != std::string::npos);
}

TEST_CASE("torch compute called from C++ is rejected unless the policy allows it", "[python]") {
  ScratchDirectory scratch("torch-compute");
  auto files = ca::testing::torch_candidate("2.0");
  files["kernels/cheat.cpp"] =
      "#include <torch/extension.h>\n"
      "torch::Tensor cheat(const torch::Tensor& x) { return torch::relu(x); }\n";
  ca::testing::write_files(scratch / "candidate", files);
  ca::CompileDriver driver(RecordingSandbox{}, ca::testing::cpu_options());
  const ca::CompileResult rejected = driver.build(scratch / "candidate", scratch / "build");
  INFO(describe(rejected));
  CHECK_FALSE(rejected.succeeded);
  REQUIRE(find_error(rejected) != nullptr);
  CHECK(find_error(rejected)->message.find("at::_ops::relu") != std::string::npos);

  ca::CompileOptions options = ca::testing::cpu_options();
  options.libraries.torch_compute_in_extension = true;
  ca::CompileDriver lenient(RecordingSandbox{}, options);
  const ca::CompileResult accepted = lenient.build(scratch / "candidate", scratch / "build-lenient");
  INFO(describe(accepted));
  CHECK(accepted.succeeded);
  CHECK(accepted.objects_compiled == 0);  // same objects, other policy: only the link differs
}

TEST_CASE("candidates without a module, without sources or with .cu files on the CPU are refused clearly", "[python]") {
  ScratchDirectory scratch("contract");
  ca::CompileDriver driver(RecordingSandbox{}, ca::testing::cpu_options());

  ca::testing::write_files(scratch / "no-module",
                           {{"kernels/ops.cpp", "long ops_" + ca::testing::fresh_token() + "() { return 0; }\n"}});
  const ca::CompileResult no_module = driver.build(scratch / "no-module", scratch / "build-1");
  CHECK_FALSE(no_module.succeeded);
  REQUIRE(find_error(no_module) != nullptr);
  CHECK(find_error(no_module)->message.find("PYBIND11_MODULE") != std::string::npos);

  std::filesystem::create_directories(scratch / "empty" / "kernels");
  const ca::CompileResult empty = driver.build(scratch / "empty", scratch / "build-2");
  CHECK_FALSE(empty.succeeded);
  REQUIRE(find_error(empty) != nullptr);
  CHECK(find_error(empty)->message.find("no .cpp or .cu file") != std::string::npos);

  ca::testing::write_files(scratch / "cuda", {{"kernels/k.cu", "__global__ void k() {}\n"}});
  const ca::CompileResult cuda = driver.build(scratch / "cuda", scratch / "build-3");
  CHECK_FALSE(cuda.succeeded);
  REQUIRE(find_error(cuda) != nullptr);
  CHECK(find_error(cuda)->file == "kernels/k.cu");
  CHECK(find_error(cuda)->message.find("device \"cuda\"") != std::string::npos);
}

TEST_CASE("nvcc builds a CUDA candidate for an explicit architecture and reports its errors", "[python]") {
  if (!has_nvcc()) CUDA_AGENT_SKIP("no CUDA toolkit at /usr/local/cuda");
  ScratchDirectory scratch("nvcc");
  auto files = ca::testing::plain_candidate(ca::testing::fresh_token());
  files["kernels/kernel.cu"] =
      "__global__ void fill(float* out, int n, float value) {\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) out[i] = value;\n"
      "}\n"
      "void launch_fill(float* out, int n) { fill<<<(n + 255) / 256, 256>>>(out, n, " +
      ca::testing::fresh_token() + ".0f); }\n";
  ca::testing::write_files(scratch / "candidate", files);
  ca::CompileOptions options = ca::testing::cpu_options();
  options.device = "cuda";
  options.gpu_architecture = "sm_90a";
  RecordingSandbox sandbox;
  ca::CompileDriver driver(sandbox, options);
  CHECK(driver.toolchain().gpu_architecture == "sm_90a");

  const ca::CompileResult built = driver.build(scratch / "candidate", scratch / "build");
  INFO(describe(built));
  REQUIRE(built.succeeded);
  bool used_nvcc = false;
  for (const auto& argv : sandbox.commands())
    if (std::find(argv.begin(), argv.end(), "kernels/kernel.cu") != argv.end()) {
      used_nvcc = argv.front() == driver.toolchain().nvcc.string();
      CHECK(std::find(argv.begin(), argv.end(), "-gencode=arch=compute_90a,code=sm_90a") != argv.end());
    }
  CHECK(used_nvcc);
  const ca::ProcessResult ran =
      ca::testing::run_python(scratch / "build", "import torch, cuda_extension\nprint(cuda_extension.add(0))");
  INFO(ran.standard_output.text);
  CHECK(ran.succeeded());

  ca::testing::write_files(scratch / "candidate", {{"kernels/kernel.cu",
                                                    "__global__ void fill(float* out, int n) {\n"
                                                    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                                    "  if (i < n) out[i] = undefined_value;\n"
                                                    "}\n"}});
  const ca::CompileResult broken = driver.build(scratch / "candidate", scratch / "build");
  INFO(describe(broken));
  CHECK_FALSE(broken.succeeded);
  const ca::Diagnostic* error = find_error(broken);
  REQUIRE(error != nullptr);
  CHECK(error->file == "kernels/kernel.cu");
  CHECK(error->line == 3);
  CHECK(error->message.find("undefined_value") != std::string::npos);
}

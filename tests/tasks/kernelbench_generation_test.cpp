// SPDX-License-Identifier: Apache-2.0
// KernelBench generations laid out as candidates: the files load_inline and load would
// build, read without running the generation, and the generation's failures as rejections.
#include "catch.hpp"

#include <cuda_agent/sandbox/process_sandbox.hpp>
#include <cuda_agent/tasks/kernelbench_generation.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>  // getpid

namespace ca = cuda_agent;
namespace fs = std::filesystem;

namespace {

const fs::path generations = fs::path(CUDA_AGENT_SOURCE_DIR) / "tests" / "data" / "generations";

struct Folder {
  fs::path path = fs::temp_directory_path() / ("cuda-agent-generation-test-" + std::to_string(::getpid()));
  Folder() { fs::create_directories(path); }
  ~Folder() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  fs::path write(const std::string& name, const std::string& text) const {
    fs::create_directories((path / name).parent_path());
    std::ofstream(path / name) << text;
    return path / name;
  }
};

ca::GenerationConversion convert(const fs::path& file) {
  ca::SandboxOptions options;
  options.workspace = fs::temp_directory_path();
  ca::ProcessSandbox sandbox(options);
  ca::GenerationConversionOptions conversion;
  conversion.python = CUDA_AGENT_PYTHON;
  return ca::convert_kernelbench_generation(sandbox, file, conversion);
}

const std::string load_header = "from torch.utils.cpp_extension import load\n";

}  // namespace

TEST_CASE("a load_inline generation becomes model_new.py and the sources load_inline would build") {
  const ca::GenerationConversion converted = convert(generations / "level_1_problem_1_sample_0_kernel.py");
  REQUIRE_FALSE(converted.rejection);
  CHECK(converted.build_function == "load_inline");
  CHECK(converted.build_line == 17);
  REQUIRE(converted.candidate.files.size() == 2);
  const std::string& main = converted.candidate.files.at("kernels/main.cpp");
  CHECK(main.rfind("#include <torch/extension.h>\n", 0) == 0);
  CHECK(main.find("m.def(\"relu\", &relu, \"relu\");") != std::string::npos);
  const std::string& model = converted.candidate.files.at("model_new.py");
  CHECK(model.find("import cuda_extension\n") != std::string::npos);
  CHECK(model.find("relu = cuda_extension\n") != std::string::npos);
  CHECK(model.find("load_inline") == std::string::npos);
  REQUIRE(converted.notes.size() == 1);
  CHECK(converted.notes[0].find("-O3") != std::string::npos);
}

TEST_CASE("a load generation takes the source files beside it, never through a link or from outside") {
  const ca::GenerationConversion beside = convert(generations / "level_1_problem_1_sample_3_kernel.py");
  REQUIRE_FALSE(beside.rejection);
  CHECK(beside.build_function == "load");
  REQUIRE(beside.candidate.files.contains("kernels/relu_from_files.cpp"));
  CHECK(beside.candidate.files.at("kernels/relu_from_files.cpp").find("PYBIND11_MODULE") != std::string::npos);

  const Folder folder;
  folder.write("secret.cpp", "int secret = 1;\n");
  fs::create_directories(folder.path / "inner");
  fs::create_symlink(folder.path / "secret.cpp", folder.path / "inner" / "linked.cpp");
  const auto refused = [&](const std::string& sources) {
    const fs::path file = folder.write("inner/gen.py", load_header + "m = load(name='n', sources=" + sources + ")\n");
    const ca::GenerationConversion converted = convert(file);
    REQUIRE(converted.rejection);
    CHECK(converted.rejection->reason == ca::RejectionReason::unresolved_sources);
    CHECK(converted.candidate.files.empty());
    return converted.rejection->message;
  };
  CHECK(refused("['../secret.cpp']").find("outside the generation's folder") != std::string::npos);
  CHECK(refused("['/etc/passwd.cpp']").find("outside the generation's folder") != std::string::npos);
  CHECK(refused("['linked.cpp']").find("not a readable file") != std::string::npos);
  CHECK(refused("['missing.cu']").find("not a readable file") != std::string::npos);
  CHECK(refused("['notes.txt']").find("not a C++ or CUDA source") != std::string::npos);
  folder.write("inner/a/k.cu", "// one\n");
  folder.write("inner/b/k.cu", "// two\n");
  CHECK(refused("['a/k.cu', 'b/k.cu']").find("two sources called k.cu") != std::string::npos);
}

TEST_CASE("what only running the generation would produce is its failure, with the line") {
  const ca::GenerationConversion converted = convert(generations / "level_1_problem_1_sample_4_kernel.py");
  REQUIRE(converted.rejection);
  CHECK(converted.rejection->reason == ca::RejectionReason::unresolved_sources);
  CHECK(converted.rejection->details.at("line") == 9);
  CHECK(converted.rejection->message.find("cpp_sources") != std::string::npos);

  const Folder folder;
  const ca::GenerationConversion broken = convert(folder.write("broken.py", "class ModelNew(:\n"));
  REQUIRE(broken.rejection);
  CHECK(broken.rejection->reason == ca::RejectionReason::load_error);
  const ca::GenerationConversion missing = convert(folder.path / "absent.py");
  REQUIRE(missing.rejection);
  CHECK(missing.rejection->reason == ca::RejectionReason::load_error);
}

TEST_CASE("the host's own failures throw instead of failing the generation") {
  ca::SandboxOptions options;
  options.workspace = fs::temp_directory_path();
  ca::ProcessSandbox sandbox(options);
  ca::GenerationConversionOptions conversion;
  conversion.python = "/nonexistent/python3";
  CHECK_THROWS_AS(
      ca::convert_kernelbench_generation(sandbox, generations / "level_1_problem_1_sample_0_kernel.py", conversion),
      std::runtime_error);
}

// SPDX-License-Identifier: Apache-2.0
#pragma once

// Shared pieces of the compile tests: scratch directories, small candidates, and the
// options that point every test at one object cache, so that the expensive torch
// compiles happen once per test run (and once per cache, across runs).

#include <cuda_agent/compile/compile_driver.hpp>
#include <cuda_agent/process.hpp>

#include <chrono>      // steady_clock
#include <cstdlib>     // mkdtemp
#include <filesystem>  // path, remove_all
#include <fstream>     // ofstream
#include <map>         // map
#include <random>      // random_device
#include <stdexcept>   // runtime_error
#include <string>      // string
#include <vector>      // vector

#include "recording_sandbox.hpp"

namespace cuda_agent::testing {

/// A fresh directory below the build tree, removed again at the end of the test.
class ScratchDirectory {
 public:
  explicit ScratchDirectory(const std::string& purpose) {
    const std::filesystem::path parent = std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "test-scratch";
    std::filesystem::create_directories(parent);
    std::string pattern = (parent / (purpose + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
    // Readable by an unprivileged sandbox user (the default umask may be stricter).
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                            std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                            std::filesystem::perms::others_exec);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] std::filesystem::path operator/(const std::string& relative) const { return path_ / relative; }

 private:
  std::filesystem::path path_;
};

inline void write_files(const std::filesystem::path& root, const std::map<std::string, std::string>& files) {
  for (const auto& [relative, content] : files) {
    const std::filesystem::path target = root / relative;
    std::filesystem::create_directories(target.parent_path());
    std::ofstream(target, std::ios::binary | std::ios::trunc) << content;
  }
}

/// One cache for every compile test of a build tree.
inline std::filesystem::path shared_test_cache() {
  return std::filesystem::path(CUDA_AGENT_BINARY_DIR) / "test-compile-cache";
}

inline CompileOptions cpu_options() {
  CompileOptions options;
  options.device = "cpu";
  options.cache_directory = shared_test_cache();
  options.python = CUDA_AGENT_PYTHON;
  options.timeout = std::chrono::minutes(20);  // a torch compile on a busy 2-core CI machine
  return options;
}

/// A number no earlier run has used, so that sources containing it miss the cache.
inline std::string fresh_token() {
  std::random_device entropy;
  return std::to_string(entropy()) + std::to_string(entropy() % 1000);
}

/// A module written against Python's C API only: no torch headers, so it compiles in
/// a fraction of a second. `ops.cpp` returns `value + offset`.
inline std::map<std::string, std::string> plain_candidate(const std::string& offset) {
  return {
      {"kernels/module.cpp",
       "#include <Python.h>\n"
       "#include \"ops.h\"\n"
       "static PyObject* add(PyObject*, PyObject* args) {\n"
       "  long value = 0;\n"
       "  if (!PyArg_ParseTuple(args, \"l\", &value)) return nullptr;\n"
       "  return PyLong_FromLong(ops_add(value));\n"
       "}\n"
       "static PyMethodDef methods[] = {{\"add\", add, METH_VARARGS, \"adds the offset\"}, {nullptr, nullptr, 0, "
       "nullptr}};\n"
       "static PyModuleDef module_definition = {PyModuleDef_HEAD_INIT, \"cuda_extension\", nullptr, -1, methods,\n"
       "                                        nullptr, nullptr, nullptr, nullptr};\n"
       "PyMODINIT_FUNC PyInit_cuda_extension() { return PyModule_Create(&module_definition); }\n"},
      {"kernels/ops.h", "#pragma once\nlong ops_add(long value);\n"},
      {"kernels/ops.cpp",
       "#include \"ops.h\"\n#include \"offset.h\"\nlong ops_add(long value) { return value + kOffset; }\n"},
      {"kernels/offset.h", "#pragma once\nconstexpr long kOffset = " + offset + "L;\n"},
  };
}

/// A torch extension: a binding that includes torch/extension.h (the expensive file,
/// the same in every test so that it is compiled once) and a plain C++ kernel.
inline std::map<std::string, std::string> torch_candidate(const std::string& scale,
                                                          const std::string& torch_header = "torch/extension.h") {
  return {
      {"kernels/binding.cpp",
       "#include <" + torch_header +
           ">\n"
           "#include \"scale.h\"\n"
           "\n"
           "torch::Tensor scale(torch::Tensor input) {\n"
           "  TORCH_CHECK(input.is_contiguous() && input.scalar_type() == torch::kFloat32, \"expected contiguous "
           "float32\");\n"
           "  torch::Tensor output = torch::empty_like(input);\n"
           "  scale_kernel(input.data_ptr<float>(), output.data_ptr<float>(), input.numel());\n"
           "  return output;\n"
           "}\n"
           "\n"
           "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"scale\", &scale, \"multiplies by the scale\"); }\n"},
      {"kernels/scale.h",
       "#pragma once\n#include <cstdint>\nvoid scale_kernel(const float* in, float* out, std::int64_t n);\n"},
      {"kernels/scale.cpp",
       "#include \"scale.h\"\n"
       "void scale_kernel(const float* in, float* out, std::int64_t n) {\n"
       "  for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] * " +
           scale +
           "f;\n"
           "}\n"},
  };
}

/// Runs `code` in CUDA_AGENT_PYTHON with `module_directory` first on sys.path; returns
/// stdout and stderr together.
inline ProcessResult run_python(const std::filesystem::path& module_directory, const std::string& code) {
  ProcessSpec spec;
  spec.argv = {CUDA_AGENT_PYTHON, "-c", "import sys; sys.path.insert(0, '" + module_directory.string() + "')\n" + code};
  spec.environment = Environment::from_current({"PATH", "HOME", "LANG", "LD_LIBRARY_PATH"});
  spec.merge_stderr = true;
  spec.timeout = std::chrono::minutes(3);
  return run_process(spec);
}

/// A build's outcome and its diagnostics, for a failed check's message.
inline std::string describe(const CompileResult& result) {
  std::string text = "succeeded=" + std::to_string(result.succeeded) + "\n";
  for (const auto& d : result.diagnostics)
    text += d.file + ":" + std::to_string(d.line) + ":" + std::to_string(d.column) + ": " + d.message + "\n";
  return text + result.log.substr(0, 6000);
}

}  // namespace cuda_agent::testing

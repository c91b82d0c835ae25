// SPDX-License-Identifier: Apache-2.0
#include "catch.hpp"

#include <cuda_agent/compile/compile_driver.hpp>
#include <cuda_agent/compile/compile_tool.hpp>
#include <cuda_agent/compile/detail/elf_symbols.hpp>
#include <cuda_agent/library_policy.hpp>

#include <algorithm>  // find
#include <map>        // map
#include <set>        // set
#include <string>     // string
#include <vector>     // vector

namespace ca = cuda_agent;

TEST_CASE("g++ diagnostics are located, with the build's source root stripped", "[compile]") {
  const std::string output =
      "In file included from kernels/binding.cpp:3:\n"
      "/tmp/b/src/kernels/ops.h:7:12: error: 'undefined' was not declared in this scope\n"
      "kernels/binding.cpp: In function 'at::Tensor f(at::Tensor)':\n"
      "kernels/binding.cpp:12:5: warning: unused variable 'x' [-Wunused-variable]\n"
      "   12 |   int x = 0;\n"
      "      |       ^\n"
      "kernels/binding.cpp:20: note: in expansion of macro 'CHECK'\n"
      "kernels/steal.cpp:1:10: fatal error: /etc/shadow: Permission denied\n"
      "compilation terminated.\n";
  const auto diagnostics = ca::parse_compiler_diagnostics(output, "/tmp/b/src/", "kernels/binding.cpp");
  REQUIRE(diagnostics.size() == 4);
  CHECK(diagnostics[0].file == "kernels/ops.h");
  CHECK(diagnostics[0].line == 7);
  CHECK(diagnostics[0].column == 12);
  CHECK(diagnostics[0].severity == ca::DiagnosticSeverity::error);
  CHECK(diagnostics[0].message == "'undefined' was not declared in this scope");
  CHECK(diagnostics[1].severity == ca::DiagnosticSeverity::warning);
  CHECK(diagnostics[1].line == 12);
  CHECK(diagnostics[2].severity == ca::DiagnosticSeverity::note);
  CHECK(diagnostics[2].line == 20);
  CHECK(diagnostics[2].column == 0);
  CHECK(diagnostics[3].severity == ca::DiagnosticSeverity::error);
  CHECK(diagnostics[3].message == "/etc/shadow: Permission denied");
}

TEST_CASE("nvcc diagnostics keep EDG's continuation lines but not its source echo", "[compile]") {
  // As nvcc 13 prints them.
  const std::string output =
      "kernels/k.cu(1): error: identifier \"missing_name\" is undefined\n"
      "  template <typename T> __attribute__((device)) T twice(T x) { return x + missing_name; }\n"
      "                                                                          ^\n"
      "\n"
      "kernels/k.cu(9): error: no instance of overloaded function \"f\" matches the argument list\n"
      "            argument types are: (float *)\n"
      "    f(out);\n"
      "    ^\n"
      "          detected during instantiation of \"void g<T>() [with T=float]\" at line 20\n"
      "\n"
      "kernels/w.cu(2): warning #177-D: variable \"unused\" was declared but never referenced\n"
      "    int unused = 3;\n"
      "        ^\n"
      "\n"
      "Remark: The warnings can be suppressed with \"-diag-suppress <warning-number>\"\n"
      "\n"
      "ptxas error   : Entry function '_Z3bigPf' uses too much shared data (0x27100 bytes, 0xc000 max)\n"
      "ptxas info    : Used 10 registers\n"
      "nvcc fatal   : Unsupported gpu architecture 'compute_999'\n"
      "2 errors detected in the compilation of \"kernels/k.cu\".\n";
  const auto diagnostics = ca::parse_compiler_diagnostics(output, "/b/src/", "kernels/k.cu");
  REQUIRE(diagnostics.size() == 5);
  CHECK(diagnostics[0].file == "kernels/k.cu");
  CHECK(diagnostics[0].line == 1);
  CHECK(diagnostics[0].message == "identifier \"missing_name\" is undefined");
  CHECK(diagnostics[1].line == 9);
  CHECK(diagnostics[1].message ==
        "no instance of overloaded function \"f\" matches the argument list\n  argument types are: (float *)");
  CHECK(diagnostics[2].file == "kernels/w.cu");
  CHECK(diagnostics[2].severity == ca::DiagnosticSeverity::warning);
  CHECK(diagnostics[2].message == "variable \"unused\" was declared but never referenced");
  CHECK(diagnostics[3].file == "kernels/k.cu");
  CHECK(diagnostics[3].line == 0);
  CHECK(diagnostics[3].message.find("ptxas: Entry function") == 0);
  CHECK(diagnostics[4].severity == ca::DiagnosticSeverity::error);
  CHECK(diagnostics[4].message.find("Unsupported gpu architecture") != std::string::npos);
}

TEST_CASE("linker errors become diagnostics", "[compile]") {
  const std::string output =
      "/usr/bin/ld: /b/obj/kernels/binding.cpp.o: in function `forward(at::Tensor)':\n"
      "binding.cpp:(.text+0x1a): undefined reference to `launch_relu(float const*, float*, long)'\n"
      "/usr/bin/ld: cannot find -lcudnn_missing: No such file or directory\n"
      "collect2: error: ld returned 1 exit status\n";
  const auto diagnostics = ca::parse_compiler_diagnostics(output);
  REQUIRE(diagnostics.size() == 2);
  CHECK(diagnostics[0].file == "binding.cpp");
  CHECK(diagnostics[0].message == "link: undefined reference to `launch_relu(float const*, float*, long)'");
  CHECK(diagnostics[1].message.find("cannot find -lcudnn_missing") != std::string::npos);
}

TEST_CASE("depfiles are parsed with escapes and continuations", "[compile]") {
  const std::string depfile =
      "/b/obj/kernels/a.cu.o: kernels/a.cu kernels/a\\ b.h \\\n"
      "  /usr/include/stdio.h kernels/cost$$.h \\\n"
      "  kernels/sub/c.cuh\n"
      "\n"
      "kernels/a\\ b.h:\n";
  const auto prerequisites = ca::detail::compile::parse_depfile(depfile);
  const std::vector<std::string> expected = {"kernels/a.cu", "kernels/a b.h", "/usr/include/stdio.h", "kernels/cost$.h",
                                             "kernels/sub/c.cuh"};
  CHECK(prerequisites == expected);
}

TEST_CASE("files that include torch are found through the candidate's own headers", "[compile]") {
  const std::map<std::string, std::string> files = {
      {"kernels/binding.cpp", "#include \"common.h\"\nint f();\n"},
      {"kernels/common.h", "#pragma once\n  #  include <torch/types.h>\n"},
      {"kernels/plain.cpp", "#include <vector>\n#include \"plain.h\"\n"},
      {"kernels/plain.h", "// #include <torch/extension.h> is mentioned in a comment only\n"},
  };
  CHECK(ca::detail::compile::torch_includes("kernels/binding.cpp", files) == std::set<std::string>{"torch/types.h"});
  CHECK(ca::detail::compile::torch_includes("kernels/plain.cpp", files).empty());
}

TEST_CASE("a file that includes torch's C++ frontend, even through its own headers, gets the frontend header",
          "[compile]") {
  namespace compile = ca::detail::compile;
  const std::map<std::string, std::string> files = {
      {"kernels/binding.cpp", "#include <torch/python.h>\n#include \"common/checks.h\"\n"},
      {"kernels/common/checks.h", "#pragma once\n  #  include <c10/util/Exception.h>\n#include \"../nn_bits.h\"\n"},
      {"kernels/nn_bits.h", "#include <torch/nn/functional.h>\n"},
      {"kernels/plain.cpp", "#include \"plain.h\"\n#include <vector>\n"},
      {"kernels/plain.h", "int plain();\n"},
      {"kernels/light.cpp", "#include <torch/types.h>\n#include <pybind11/pybind11.h>\n"}};
  const std::set<std::string> binding = compile::torch_includes("kernels/binding.cpp", files);
  CHECK(binding == std::set<std::string>{"torch/python.h", "c10/util/Exception.h", "torch/nn/functional.h"});
  CHECK(compile::torch_includes("kernels/plain.cpp", files).empty());
  const ca::CompileOptions defaults;
  CHECK(compile::includes_any_of(binding, defaults.precompiled_header_frontend_prefixes));
  CHECK_FALSE(compile::includes_any_of(compile::torch_includes("kernels/light.cpp", files),
                                       defaults.precompiled_header_frontend_prefixes));
  CHECK(compile::includes_any_of({"torch/extension.h"}, defaults.precompiled_header_frontend_prefixes));
  CHECK(compile::includes_any_of({"torch/torch.h"}, defaults.precompiled_header_frontend_prefixes));
}

TEST_CASE("the dynamic symbol reader finds what a shared object needs and defines", "[compile]") {
  const std::string libc = ca::detail::read_file("/lib/x86_64-linux-gnu/libc.so.6");
  const auto symbols = ca::detail::read_dynamic_symbols(libc);
  REQUIRE(symbols.has_value());
  CHECK(std::find(symbols->defined.begin(), symbols->defined.end(), "malloc") != symbols->defined.end());
  CHECK_FALSE(ca::detail::read_dynamic_symbols("not an ELF file at all, but long enough to be read as one........"));
  CHECK_FALSE(ca::detail::read_dynamic_symbols(libc.substr(0, 100)));  // truncated tables
}

TEST_CASE("the library policy names what it forbids", "[compile]") {
  const ca::LibraryPolicy defaults;
  CHECK(defaults.cublas);
  CHECK(defaults.cudnn);
  CHECK(defaults.allowed_libraries() == "cuBLAS (for GEMM) and cuDNN (for convolutions)");
  CHECK(ca::detail::library_policy_violation("cublasSgemm_v2", defaults).empty());
  CHECK(ca::detail::library_policy_violation("dlopen", defaults).find("run time") != std::string::npos);
  // at::_ops::relu::call(at::Tensor const&)
  CHECK(ca::detail::library_policy_violation("_ZN2at4_ops4relu4callERKNS_6TensorE", defaults).find("at::_ops::relu") !=
        std::string::npos);
  // at::_ops::empty_like::call(...): allocation is always allowed.
  CHECK(ca::detail::library_policy_violation("_ZN2at4_ops10empty_like4callERKNS_6TensorE", defaults).empty());
  CHECK(ca::detail::torch_operator_of_symbol("_ZN2at4_ops10add_Tensor4callE") == "add_Tensor");
  CHECK(ca::detail::torch_operator_of_symbol("_ZN3c106detail") == "");

  ca::LibraryPolicy strict;
  strict.cublas = false;
  strict.cudnn = false;
  CHECK(strict.allowed_libraries() == "no external libraries");
  CHECK(ca::detail::library_policy_violation("cublasLtMatmul", strict).find("cuBLAS") != std::string::npos);
  CHECK(ca::detail::library_policy_violation("cudnnConvolutionForward", strict).find("cuDNN") != std::string::npos);
  nlohmann::json json = strict;
  CHECK(json.get<ca::LibraryPolicy>() == strict);
}

TEST_CASE("build results are described for a model, errors first and capped", "[compile]") {
  ca::CompileResult result;
  result.duration = std::chrono::milliseconds(4200);
  result.diagnostics.push_back({"kernels/a.cu", 3, 0, ca::DiagnosticSeverity::warning, "unused variable"});
  for (int i = 1; i <= 40; ++i)
    result.diagnostics.push_back(
        {"kernels/b.cpp", i, 2, ca::DiagnosticSeverity::error, "error number " + std::to_string(i)});
  const std::string text = ca::describe_compile_result(result, 10);
  CHECK(text.rfind("Build failed in 4.20 s with 40 errors and 1 warning.\n", 0) == 0);
  CHECK(text.find("kernels/b.cpp:1:2: error: error number 1\n") != std::string::npos);
  CHECK(text.find("error number 11") == std::string::npos);
  CHECK(text.find("unused variable") == std::string::npos);  // errors come first and fill the cap
  CHECK(text.find("(31 more diagnostics not shown.)") != std::string::npos);

  ca::CompileResult good;
  good.succeeded = true;
  good.objects_compiled = 1;
  good.objects_reused = 2;
  good.duration = std::chrono::milliseconds(1500);
  CHECK(ca::describe_compile_result(good) == "Build succeeded in 1.50 s: 1 file compiled, 2 reused from the cache.\n");
}

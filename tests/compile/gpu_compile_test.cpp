// SPDX-License-Identifier: Apache-2.0
// Builds that need an NVIDIA GPU: the architecture is detected, kernels run, and cuBLAS
// and cuDNN link as the library policy says.
#include "catch.hpp"

#include <cuda_agent/compile/compile_driver.hpp>
#include <cuda_agent/tasks/task_loader.hpp>
#include <cuda_agent/tasks/workspace.hpp>

#include <string>  // string

#include "compile_test_support.hpp"

namespace ca = cuda_agent;
using ca::testing::describe;
using ca::testing::RecordingSandbox;
using Catch::Matchers::Contains;

namespace {

bool gpu_present() {
  const auto smi = ca::find_program("nvidia-smi", ca::Environment::inherit_all());
  if (!smi) return false;
  ca::ProcessSpec spec;
  spec.argv = {smi->string(), "-L"};
  spec.environment = ca::Environment::inherit_all();
  spec.timeout = std::chrono::seconds(30);
  const ca::ProcessResult listed = ca::run_process(spec);
  return listed.succeeded() && listed.standard_output.text.find("GPU") != std::string::npos;
}

ca::CompileOptions gpu_options() {
  ca::CompileOptions options = ca::testing::cpu_options();
  options.device = "cuda";
  return options;
}

}  // namespace

TEST_CASE("the CUDA starter builds for the detected GPU and its kernel runs", "[gpu]") {
  if (!gpu_present()) CUDA_AGENT_SKIP("no NVIDIA GPU (nvidia-smi -L lists none)");
  ca::testing::ScratchDirectory scratch("gpu-starter");
  const ca::Task task =
      ca::load_kernelbench_task(std::filesystem::path(CUDA_AGENT_TEST_DATA_DIR) / "kernelbench/level1/19_ReLU.py");
  ca::WorkspaceOptions workspace_options;
  workspace_options.hand_over = [](const ca::Workspace&, const auto&) {};
  const ca::Workspace workspace = ca::materialize_workspace(task, scratch / "ws", workspace_options);

  ca::CompileDriver driver(RecordingSandbox{}, gpu_options());
  const std::string architecture = driver.toolchain().gpu_architecture;
  INFO(architecture);
  CHECK(architecture.rfind("sm_", 0) == 0);
  const ca::CompileResult result = driver.build(workspace.root, scratch / "build");
  INFO(describe(result));
  REQUIRE(result.succeeded);
  const ca::ProcessResult ran = ca::testing::run_python(scratch / "build",
                                                        "import torch, cuda_extension\n"
                                                        "x = torch.randn(1 << 20, device='cuda')\n"
                                                        "y = cuda_extension.scale(x, 3.0)\n"
                                                        "torch.cuda.synchronize()\n"
                                                        "print('max error', (y - 3 * x).abs().max().item())\n");
  INFO(ran.standard_output.text);
  CHECK(ran.succeeded());
  CHECK_THAT(ran.standard_output.text, Contains("max error 0.0"));

  // One .cu change recompiles that file only.
  auto kernel = ca::detail::read_file(workspace.root / "kernels/example_kernel.cu");
  kernel += "\n__global__ void unused_kernel_" + ca::testing::fresh_token() + "(float* p) { p[0] = 1.f; }\n";
  ca::testing::write_files(workspace.root, {{"kernels/example_kernel.cu", kernel}});
  const ca::CompileResult rebuilt = driver.build(workspace.root, scratch / "build");
  INFO(describe(rebuilt));
  REQUIRE(rebuilt.succeeded);
  CHECK(rebuilt.objects_compiled == 1);
  CHECK(rebuilt.objects_reused == 1);
  std::cout << "one-.cu rebuild took " << rebuilt.duration.count() << " ms on this machine\n";
}

TEST_CASE("cuBLAS and cuDNN link under the default policy, and cuBLAS is refused when the policy forbids it", "[gpu]") {
  if (!gpu_present()) CUDA_AGENT_SKIP("no NVIDIA GPU (nvidia-smi -L lists none)");
  ca::testing::ScratchDirectory scratch("gpu-libraries");
  ca::testing::write_files(
      scratch / "candidate",
      {
          {"kernels/binding.cpp",
           "#include <torch/extension.h>\n"
           "#include <ATen/cuda/CUDAContext.h>\n"
           "#include <cublas_v2.h>\n"
           "#include <cudnn.h>\n"
           "// C = A B for row-major float matrices, through cuBLAS (column-major: C^T = B^T A^T).\n"
           "torch::Tensor gemm(const torch::Tensor& a, const torch::Tensor& b) {\n"
           "  TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.is_contiguous() && b.is_contiguous(), \"contiguous CUDA\");\n"
           "  const int m = static_cast<int>(a.size(0)), k = static_cast<int>(a.size(1)), n = "
           "static_cast<int>(b.size(1));\n"
           "  torch::Tensor c = torch::empty({m, n}, a.options());\n"
           "  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();\n"
           "  const float one = 1.f, zero = 0.f;\n"
           "  TORCH_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b.data_ptr<float>(), n,\n"
           "                          a.data_ptr<float>(), k, &zero, c.data_ptr<float>(), n) == "
           "CUBLAS_STATUS_SUCCESS);\n"
           "  return c;\n"
           "}\n"
           "long cudnn_version() { return static_cast<long>(cudnnGetVersion()); }\n"
           "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
           "  m.def(\"gemm\", &gemm);\n"
           "  m.def(\"cudnn_version\", &cudnn_version);\n"
           "}\n"},
      });
  ca::CompileDriver driver(RecordingSandbox{}, gpu_options());
  const ca::CompileResult result = driver.build(scratch / "candidate", scratch / "build");
  INFO(describe(result));
  REQUIRE(result.succeeded);
  const ca::ProcessResult ran =
      ca::testing::run_python(scratch / "build",
                              "import torch, cuda_extension\n"
                              "a = torch.randn(64, 32, device='cuda'); b = torch.randn(32, 48, device='cuda')\n"
                              "print('gemm error', (cuda_extension.gemm(a, b) - a @ b).abs().max().item() < 1e-3)\n"
                              "print('cudnn', cuda_extension.cudnn_version() > 0)\n");
  INFO(ran.standard_output.text);
  CHECK_THAT(ran.standard_output.text, Contains("gemm error True"));
  CHECK_THAT(ran.standard_output.text, Contains("cudnn True"));

  ca::CompileOptions strict = gpu_options();
  strict.libraries.cublas = false;
  ca::CompileDriver strict_driver(RecordingSandbox{}, strict);
  const ca::CompileResult refused = strict_driver.build(scratch / "candidate", scratch / "build-strict");
  INFO(describe(refused));
  CHECK_FALSE(refused.succeeded);
  bool named = false;
  for (const auto& diagnostic : refused.diagnostics)
    named = named || diagnostic.message.find("cuBLAS") != std::string::npos;
  CHECK(named);
}

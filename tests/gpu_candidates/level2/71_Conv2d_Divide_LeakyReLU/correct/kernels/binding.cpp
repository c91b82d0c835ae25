#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAGuard.h>

#include <climits>  // INT_MAX

#include "cudnn_conv.h"

cudaError_t launch_bias_divide_leaky_relu(float* y, const float* bias, int64_t batch, int64_t channels, int64_t plane,
                                          float divisor, float negative_slope, cudaStream_t stream);

namespace {

void check_float_cuda(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, double divisor,
                      double negative_slope) {
  check_float_cuda(x, "x");
  check_float_cuda(weight, "conv.weight");
  check_float_cuda(bias, "conv.bias");
  TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && x.size(1) == weight.size(1) && bias.numel() == weight.size(0),
              "expected x (N, C, H, W), weight (K, C, R, S), bias (K,), got ", x.sizes(), ", ", weight.sizes(), ", ",
              bias.sizes());
  for (int64_t d = 0; d < 4; ++d) TORCH_CHECK(x.size(d) <= INT_MAX && weight.size(d) <= INT_MAX, "too large for cuDNN");
  const Conv2dGeometry geometry{static_cast<int>(x.size(0)),      static_cast<int>(x.size(1)),
                                static_cast<int>(x.size(2)),      static_cast<int>(x.size(3)),
                                static_cast<int>(weight.size(0)), static_cast<int>(weight.size(2)),
                                static_cast<int>(weight.size(3)), 0, 0, 1, 1, 1, 1};
  TORCH_CHECK(geometry.out_height() > 0 && geometry.out_width() > 0, "kernel larger than the input");
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor y = torch::empty({geometry.batch, geometry.out_channels, geometry.out_height(), geometry.out_width()},
                                 x.options());
  if (y.numel() == 0) return y;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const cudnnHandle_t handle = at::native::getCudnnHandle();
  const cudnnStatus_t stream_status = cudnnSetStream(handle, stream);
  TORCH_CHECK(stream_status == CUDNN_STATUS_SUCCESS, "cudnnSetStream failed: ", cudnnGetErrorString(stream_status));
  const CudnnConv2d conv(handle, geometry);
  TORCH_CHECK(conv.status() == CUDNN_STATUS_SUCCESS, conv.failed_call(), " failed: ", cudnnGetErrorString(conv.status()));
  torch::Tensor workspace =
      torch::empty({static_cast<int64_t>(conv.workspace_bytes())}, x.options().dtype(torch::kUInt8));
  const cudnnStatus_t conv_status =
      conv.run(x.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(), workspace.data_ptr());
  TORCH_CHECK(conv_status == CUDNN_STATUS_SUCCESS, "cudnnConvolutionForward failed: ", cudnnGetErrorString(conv_status));
  const cudaError_t status = launch_bias_divide_leaky_relu(
      y.data_ptr<float>(), bias.data_ptr<float>(), geometry.batch, geometry.out_channels,
      static_cast<int64_t>(geometry.out_height()) * geometry.out_width(), static_cast<float>(divisor),
      static_cast<float>(negative_slope), stream);
  TORCH_CHECK(status == cudaSuccess, "bias+divide+leaky_relu kernel launch failed: ", cudaGetErrorString(status));
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "leaky_relu((conv2d(x) + b) / divisor) (cuDNN + fused CUDA epilogue)", py::arg("x"),
        py::arg("weight"), py::arg("bias"), py::arg("divisor"), py::arg("negative_slope"));
}

// A forward 2-D cross-correlation (nn.Conv2d without bias, groups = 1) planned with cuDNN,
// NCHW float32 with FMA math only: no TF32 and no reduced precision.
#pragma once

#include <cudnn.h>

#include <cstddef>

struct Conv2dGeometry {
  int batch, in_channels, height, width;
  int out_channels, kernel_h, kernel_w;
  int pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w;

  int out_height() const { return (height + 2 * pad_h - dilation_h * (kernel_h - 1) - 1) / stride_h + 1; }
  int out_width() const { return (width + 2 * pad_w - dilation_w * (kernel_w - 1) - 1) / stride_w + 1; }
};

class CudnnConv2d {
 public:
  // On failure status() is not CUDNN_STATUS_SUCCESS and failed_call() names the call.
  CudnnConv2d(cudnnHandle_t handle, const Conv2dGeometry& geometry);
  ~CudnnConv2d();
  CudnnConv2d(const CudnnConv2d&) = delete;
  CudnnConv2d& operator=(const CudnnConv2d&) = delete;

  cudnnStatus_t status() const { return status_; }
  const char* failed_call() const { return failed_call_; }
  std::size_t workspace_bytes() const { return workspace_bytes_; }

  // y = conv(x, w); `workspace` must hold workspace_bytes() bytes. Tries the planned
  // algorithms in order and returns the first success (or the last error).
  cudnnStatus_t run(const float* x, const float* w, float* y, void* workspace) const;

 private:
  static constexpr int kMaxAlgorithms = 4;
  static constexpr std::size_t kMaxWorkspaceBytes = std::size_t{256} << 20;

  bool check(cudnnStatus_t status, const char* call);
  void add_algorithm(cudnnConvolutionFwdAlgo_t algorithm);

  cudnnHandle_t handle_;
  cudnnTensorDescriptor_t input_ = nullptr;
  cudnnTensorDescriptor_t output_ = nullptr;
  cudnnFilterDescriptor_t filter_ = nullptr;
  cudnnConvolutionDescriptor_t convolution_ = nullptr;
  cudnnConvolutionFwdAlgo_t algorithms_[kMaxAlgorithms] = {};
  int algorithm_count_ = 0;
  std::size_t workspace_bytes_ = 0;
  cudnnStatus_t status_ = CUDNN_STATUS_SUCCESS;
  const char* failed_call_ = "";
};

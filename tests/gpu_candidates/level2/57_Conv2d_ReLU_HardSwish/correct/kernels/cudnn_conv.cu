#include "cudnn_conv.h"

#include <cudnn.h>

#include <cstddef>

bool CudnnConv2d::check(cudnnStatus_t status, const char* call) {
  if (status_ == CUDNN_STATUS_SUCCESS && status != CUDNN_STATUS_SUCCESS) {
    status_ = status;
    failed_call_ = call;
  }
  return status_ == CUDNN_STATUS_SUCCESS;
}

CudnnConv2d::CudnnConv2d(cudnnHandle_t handle, const Conv2dGeometry& g) : handle_(handle) {
  if (!check(cudnnCreateTensorDescriptor(&input_), "cudnnCreateTensorDescriptor") ||
      !check(cudnnCreateTensorDescriptor(&output_), "cudnnCreateTensorDescriptor") ||
      !check(cudnnCreateFilterDescriptor(&filter_), "cudnnCreateFilterDescriptor") ||
      !check(cudnnCreateConvolutionDescriptor(&convolution_), "cudnnCreateConvolutionDescriptor"))
    return;
  if (!check(cudnnSetTensor4dDescriptor(input_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.batch, g.in_channels, g.height,
                                        g.width),
             "cudnnSetTensor4dDescriptor(input)") ||
      !check(cudnnSetFilter4dDescriptor(filter_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, g.out_channels, g.in_channels,
                                        g.kernel_h, g.kernel_w),
             "cudnnSetFilter4dDescriptor") ||
      !check(cudnnSetConvolution2dDescriptor(convolution_, g.pad_h, g.pad_w, g.stride_h, g.stride_w, g.dilation_h,
                                             g.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
             "cudnnSetConvolution2dDescriptor") ||
      !check(cudnnSetConvolutionMathType(convolution_, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType") ||
      !check(cudnnSetTensor4dDescriptor(output_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.batch, g.out_channels,
                                        g.out_height(), g.out_width()),
             "cudnnSetTensor4dDescriptor(output)"))
    return;
  // The heuristics' first deterministic choice under FMA math, then implicit precomputed GEMM and plain
  // implicit GEMM (no workspace), which cover every geometry in fp32.
  cudnnConvolutionFwdAlgoPerf_t ranked[kMaxAlgorithms] = {};
  int returned = 0;
  if (cudnnGetConvolutionForwardAlgorithm_v7(handle_, input_, filter_, convolution_, output_, kMaxAlgorithms,
                                             &returned, ranked) == CUDNN_STATUS_SUCCESS) {
    for (int i = 0; i < returned && algorithm_count_ == 0; ++i)
      if (ranked[i].status == CUDNN_STATUS_SUCCESS && ranked[i].mathType == CUDNN_FMA_MATH &&
          ranked[i].determinism == CUDNN_DETERMINISTIC)
        add_algorithm(ranked[i].algo);
  }
  add_algorithm(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  add_algorithm(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
  if (algorithm_count_ == 0) check(CUDNN_STATUS_NOT_SUPPORTED, "cudnnGetConvolutionForwardWorkspaceSize");
}

void CudnnConv2d::add_algorithm(cudnnConvolutionFwdAlgo_t algorithm) {
  for (int i = 0; i < algorithm_count_; ++i)
    if (algorithms_[i] == algorithm) return;
  std::size_t bytes = 0;
  if (algorithm_count_ == kMaxAlgorithms ||
      cudnnGetConvolutionForwardWorkspaceSize(handle_, input_, filter_, convolution_, output_, algorithm, &bytes) !=
          CUDNN_STATUS_SUCCESS ||
      bytes > kMaxWorkspaceBytes)
    return;
  algorithms_[algorithm_count_++] = algorithm;
  if (bytes > workspace_bytes_) workspace_bytes_ = bytes;
}

CudnnConv2d::~CudnnConv2d() {
  if (convolution_ != nullptr) cudnnDestroyConvolutionDescriptor(convolution_);
  if (filter_ != nullptr) cudnnDestroyFilterDescriptor(filter_);
  if (output_ != nullptr) cudnnDestroyTensorDescriptor(output_);
  if (input_ != nullptr) cudnnDestroyTensorDescriptor(input_);
}

cudnnStatus_t CudnnConv2d::run(const float* x, const float* w, float* y, void* workspace) const {
  if (status_ != CUDNN_STATUS_SUCCESS) return status_;
  const float alpha = 1.f;
  const float beta = 0.f;
  cudnnStatus_t status = CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < algorithm_count_; ++i) {
    status = cudnnConvolutionForward(handle_, &alpha, input_, x, filter_, w, convolution_, algorithms_[i], workspace,
                                     workspace_bytes_, &beta, output_, y);
    if (status == CUDNN_STATUS_SUCCESS) break;
  }
  return status;
}

// sum_j (x W^T)_ij / 2 * s  =  x_i . (sum_j W_j) * s / 2: one pass over W (column sums),
// one pass over x (a dot product per row) instead of a GEMM.
#include <torch/extension.h>

#include <cuda_runtime.h>

namespace {

// column_sums[column] = factor * sum over rows of weight[row][column]; one thread per column.
__global__ void column_sums(const float* __restrict__ weight, int rows, int columns, float factor,
                            float* __restrict__ sums) {
  const int column = blockIdx.x * blockDim.x + threadIdx.x;
  if (column >= columns) return;
  float sum = 0.f;
  for (int row = 0; row < rows; ++row) sum += weight[static_cast<long long>(row) * columns + column];
  sums[column] = sum * factor;
}

// out[row] = x[row] . sums, one block per row.
template <int Threads>
__global__ void row_dot(const float* __restrict__ x, const float* __restrict__ sums, int columns,
                        float* __restrict__ out) {
  const float* row = x + static_cast<long long>(blockIdx.x) * columns;
  float sum = 0.f;
  for (int column = threadIdx.x; column < columns; column += Threads) sum += row[column] * sums[column];
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  __shared__ float warp_sums[Threads / 32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int warp = 0; warp < Threads / 32; ++warp) total += warp_sums[warp];
    out[blockIdx.x] = total;
  }
}

}  // namespace

// sum(x @ weight.T / 2, dim=1, keepdim=True) * scaling_factor
torch::Tensor gemm_divide_sum_scale(const torch::Tensor& x, const torch::Tensor& weight, double scaling_factor) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "x and weight must be CUDA tensors");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32, "float32 only");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "shapes: x (B, K), weight (N, K)");
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous(), "x and weight must be contiguous");
  const int batch = static_cast<int>(x.size(0));
  const int in_features = static_cast<int>(x.size(1));
  const int hidden = static_cast<int>(weight.size(0));
  auto sums = torch::empty({in_features}, x.options());
  auto out = torch::empty({batch, 1}, x.options());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  column_sums<<<(in_features + 255) / 256, 256, 0, stream>>>(weight.data_ptr<float>(), hidden, in_features,
                                                             static_cast<float>(scaling_factor), sums.data_ptr<float>());
  row_dot<256><<<batch, 256, 0, stream>>>(x.data_ptr<float>(), sums.data_ptr<float>(), in_features,
                                          out.data_ptr<float>());
  const cudaError_t status = cudaGetLastError();
  TORCH_CHECK(status == cudaSuccess, "kernel launch failed: ", cudaGetErrorString(status));
  return out;
}

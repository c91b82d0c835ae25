import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """C = A @ B for row-major float32 matrices with one cuBLAS SGEMM (full fp32 math)."""

    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return cuda_extension.forward(A, B)

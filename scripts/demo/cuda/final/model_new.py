import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """sum(x @ W.T / 2, dim=1) * s computed as x . (column sums of W) * s / 2."""

    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return cuda_extension.gemm_divide_sum_scale(x, self.weight, self.scaling_factor)

import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Sum over one dimension (keepdim=True): each thread owns one output element and walks the
    reduced dimension; neighbouring threads read neighbouring addresses, so every load is
    coalesced."""

    def __init__(self, dim: int):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.forward(x, self.dim)

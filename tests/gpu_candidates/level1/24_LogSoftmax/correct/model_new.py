import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """LogSoftmax along the last dimension: one block per row, an online (max, sum of exp)
    pass and a write pass."""

    def __init__(self, dim: int = 1):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.forward(x, self.dim)

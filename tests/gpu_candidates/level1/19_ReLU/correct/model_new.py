import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """ReLU as one vectorized (float4) grid-stride kernel."""

    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.forward(x)

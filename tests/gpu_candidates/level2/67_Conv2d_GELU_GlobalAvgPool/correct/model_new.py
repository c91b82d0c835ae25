import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Fused direct 3x3 convolution + bias + exact GELU + global average pool: per-block
    per-channel partial sums, then a fixed-order sum over blocks (deterministic). The conv
    output never reaches memory. `self.conv` only holds the parameters; it is never called."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return cuda_extension.forward(x, self.conv.weight, self.conv.bias)

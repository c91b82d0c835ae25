import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """One fused kernel: direct 3x3 convolution computing all output channels of a pixel in
    registers, + bias, minimum over channels, tanh(tanh(.)). The (N, 64, H', W') convolution
    output never reaches memory. `self.conv` only holds the parameters; it is never called."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return cuda_extension.forward(x, self.conv.weight, self.conv.bias)

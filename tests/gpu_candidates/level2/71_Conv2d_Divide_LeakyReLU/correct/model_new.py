import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Conv2d by cuDNN (fp32 FMA math, no TF32), then one fused epilogue kernel:
    (y + bias) / divisor, LeakyReLU(0.01), in place. `self.conv` only holds the parameters;
    it is never called."""

    def __init__(self, in_channels, out_channels, kernel_size, divisor):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.divisor = float(divisor)

    def forward(self, x):
        return cuda_extension.forward(x, self.conv.weight, self.conv.bias, self.divisor, 0.01)

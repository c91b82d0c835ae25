import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, min_value, max_value):
        super().__init__()
        # Kept as received, and one derived on the host: the kernel gets the bounds per call.
        self.min_value = min_value
        self.width = max_value - min_value

    def forward(self, x):
        return cuda_extension.clamp(x, self.min_value, self.min_value + self.width)

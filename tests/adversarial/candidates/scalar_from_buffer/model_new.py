import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("low", torch.tensor(-6.0), persistent=False)
        self.register_buffer("high", torch.tensor(6.0), persistent=False)

    def forward(self, x):
        return cuda_extension.clamp(x, self.low.item(), self.high.item())

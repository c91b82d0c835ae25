import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = torch.zeros(1, dtype=torch.int64)

    def forward(self, x):
        return cuda_extension.relu_flaky(x, self.calls)

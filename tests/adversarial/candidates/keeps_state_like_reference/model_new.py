import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = torch.zeros(1)

    def forward(self, x):
        self.last = cuda_extension.relu(x)
        return self.last

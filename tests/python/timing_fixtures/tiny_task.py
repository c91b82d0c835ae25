# small_task.py with outputs around 1e-4: zeros are within an absolute 1e-2 of them.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(256))

    def forward(self, x):
        return torch.relu(x * self.scale + self.bias) * 1e-4


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [2.0]

# A task small enough to time on a loaded CI machine: scale, bias, ReLU.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(256))

    def forward(self, x):
        return torch.relu(x * self.scale + self.bias)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [2.0]

# A one-kernel elementwise task (Swish), sized so that verification and timing stay quick:
# 16M fp32 elements, about 40 µs of device time on an H200.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(2048, 8192)]


def get_init_inputs():
    return []

import functools
import math

import torch
import torch.nn as nn

import cuda_extension


@functools.lru_cache(maxsize=None)
def bounds(limit: float) -> tuple:
    return (-math.fabs(limit), math.fabs(limit))


class Unused:
    pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        low, high = bounds(6.0)
        return cuda_extension.clamp(x, low, high)

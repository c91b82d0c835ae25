import torch
import torch.nn as nn

import cuda_extension
import ctypes


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        ctypes.memset(x.data_ptr(), 0, 4)
        return cuda_extension.relu(x)

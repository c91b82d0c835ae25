import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load

# The sources are beside this file.
relu_module = load(
    name="relu_from_files",
    sources=[os.path.join(os.path.dirname(os.path.abspath(__file__)), "relu_from_files.cpp")],
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x):
        return relu_module.forward(x)

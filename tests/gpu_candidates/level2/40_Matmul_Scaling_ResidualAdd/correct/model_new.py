import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """x @ W^T by cuBLAS SGEMM, then one fused epilogue kernel, in place:
    v = acc + bias; y = v * scaling_factor + v. `self.matmul` only holds the parameters;
    it is never called."""

    def __init__(self, in_features, out_features, scaling_factor):
        super(ModelNew, self).__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.scaling_factor = float(scaling_factor)

    def forward(self, x):
        return cuda_extension.forward(x, self.matmul.weight, self.matmul.bias, self.scaling_factor)

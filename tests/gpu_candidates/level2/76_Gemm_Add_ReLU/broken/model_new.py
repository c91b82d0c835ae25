import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """x @ W^T by cuBLAS SGEMM, then one fused epilogue kernel: + bias, ReLU (in place on the
    GEMM output). `self.gemm` only holds the weight; it is never called."""

    def __init__(self, in_features, out_features, bias_shape):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return cuda_extension.forward(x, self.gemm.weight, self.bias)

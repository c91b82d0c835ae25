import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """x @ W^T by cuBLAS SGEMM, then one fused kernel per (row, group): + linear bias,
    GroupNorm statistics (two passes over the group held in L1), affine, HardTanh.
    The submodules only hold parameters; they are never called."""

    def __init__(self, in_features, out_features, num_groups, hardtanh_min, hardtanh_max):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.hardtanh_min = float(hardtanh_min)
        self.hardtanh_max = float(hardtanh_max)

    def forward(self, x):
        return cuda_extension.forward(x, self.gemm.weight, self.gemm.bias, self.group_norm.weight,
                                      self.group_norm.bias, self.group_norm.num_groups, self.group_norm.eps,
                                      self.hardtanh_min, self.hardtanh_max)

import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.packed = None
        self.key = None

    def forward(self, x):
        weight = self.fc.weight
        key = (weight._version, weight.data_ptr())
        if self.packed is None or self.key != key:
            self.packed = cuda_extension.transpose_pack(weight)
            self.key = key
        out = torch.empty(x.shape[0], weight.shape[0], dtype=x.dtype, device=x.device)
        cuda_extension.linear_packed_into(x, self.packed, self.fc.bias, out)
        return out

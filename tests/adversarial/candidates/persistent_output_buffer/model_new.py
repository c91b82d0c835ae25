import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.out = None

    def forward(self, x):
        shape = (x.shape[0], self.fc.out_features)
        if self.out is None or tuple(self.out.shape) != shape:
            self.out = torch.empty(shape, dtype=x.dtype, device=x.device)
        packed = cuda_extension.transpose_pack(self.fc.weight)
        cuda_extension.linear_packed_into(x, packed, self.fc.bias, self.out)
        return self.out

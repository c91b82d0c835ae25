import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        flat = x.reshape(-1)
        values = [max(flat[i].item(), 0.0) for i in range(flat.numel())]
        return torch.tensor(values, dtype=x.dtype, device=x.device).reshape(x.shape)

import torch
import torch.nn as nn

import cuda_extension
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.relu(x)

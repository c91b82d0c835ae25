import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Inclusive prefix sum along the last dimension: one block per row, scanning tiles of
    4 * blockDim elements with warp shuffles and carrying the running total between tiles."""

    def __init__(self, dim):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x):
        return cuda_extension.forward(x, self.dim)

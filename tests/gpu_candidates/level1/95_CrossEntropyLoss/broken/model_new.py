import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Mean cross-entropy of logits (batch, classes) against int64 class targets
    (ignore_index -100 as in torch): one warp per row, then a deterministic two-level sum."""

    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, predictions, targets):
        return cuda_extension.forward(predictions, targets)

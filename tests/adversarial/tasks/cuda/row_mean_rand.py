import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean over the last dimension of independent uniform inputs: every row mean is close
    to 0.5, and a sample of the elements estimates it well."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=-1)


rows, cols = 64, 262144


def get_inputs():
    return [torch.rand(rows, cols)]


def get_init_inputs():
    return []

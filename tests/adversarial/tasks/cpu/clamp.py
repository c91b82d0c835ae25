import torch
import torch.nn as nn


class Model(nn.Module):
    """Clamps to [-6, 6]: standard normal inputs practically never reach the bounds."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=-6.0, max=6.0)


batch_size, dim = 16, 1024


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []

import torch
import torch.nn as nn


class Model(nn.Module):
    """Clamps to bounds the constructor receives as floating-point numbers."""

    def __init__(self, min_value: float, max_value: float):
        super().__init__()
        self.min_value = min_value
        self.max_value = max_value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=self.min_value, max=self.max_value)


batch_size, dim = 4096, 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [-0.5, 0.5]

import torch
import torch.nn as nn


class Model(nn.Module):
    """Layer normalization over rows of 4 M elements: statistics taken from a sample of a
    row land close to the row's own for independent, identically distributed inputs."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


shape = (16, 512, 512)


def get_inputs():
    return [torch.rand(1, *shape)]


def get_init_inputs():
    return [shape]

import torch
import torch.nn as nn


class Model(nn.Module):
    """Layer normalization over each sample's channels and positions, of inputs that
    torch.rand draws: every row has a spread, so a kernel that leaves out the epsilon
    divides by it safely until a row is constant."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


shape = (64, 64, 64)


def get_inputs():
    return [torch.rand(32, *shape)]


def get_init_inputs():
    return [shape]

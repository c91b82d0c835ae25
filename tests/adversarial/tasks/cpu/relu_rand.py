import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU of inputs drawn with torch.rand: never negative, so the input itself is the
    output on the task's own inputs."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size, dim = 16, 1024


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []

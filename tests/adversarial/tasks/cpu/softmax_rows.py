import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over long rows of normalized values: every output is far below an absolute
    tolerance of 1e-2, whatever the scale of the inputs."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.nn.functional.layer_norm(x, (x.shape[-1],)), dim=-1)


batch_size, dim = 16, 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []

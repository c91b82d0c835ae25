import torch
import torch.nn as nn


class Model(nn.Module):
    """A fully connected layer with weights the evaluation shares through load_state_dict."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


batch_size, in_features, out_features = 16, 48, 32


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]

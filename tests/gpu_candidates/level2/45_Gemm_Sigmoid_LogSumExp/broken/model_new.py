import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Two cuBLAS SGEMMs with fused epilogues: (1) + bias, sigmoid, in place on the hidden
    activations; (2) + bias, row-wise logsumexp, one warp per row. The nn.Linear
    submodules only hold parameters; they are never called."""

    def __init__(self, input_size, hidden_size, output_size):
        super(ModelNew, self).__init__()
        self.linear1 = nn.Linear(input_size, hidden_size)
        self.linear2 = nn.Linear(hidden_size, output_size)

    def forward(self, x):
        return cuda_extension.forward(x, self.linear1.weight, self.linear1.bias, self.linear2.weight,
                                      self.linear2.bias)

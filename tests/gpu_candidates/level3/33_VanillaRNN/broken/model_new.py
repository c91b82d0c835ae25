import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """One vanilla RNN step in one extension call: the i2h product over cat(x, hidden) as two
    cuBLAS SGEMMs over column blocks of the weight (no concatenated copy), a fused bias + tanh
    kernel, then the h2o SGEMM and its bias. `i2h` and `h2o` only hold the parameters under the
    reference's names; they are never called. Like the reference, the new hidden state is kept
    for a call without `initial_hidden`."""

    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super(ModelNew, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.hidden = None
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.tanh = nn.Tanh()

    def forward(self, x: torch.Tensor, initial_hidden=None) -> torch.Tensor:
        if initial_hidden is None:
            if self.hidden is None:
                raise ValueError("the first call needs initial_hidden (batch, hidden_size)")
            initial_hidden = self.hidden
        output, self.hidden = cuda_extension.forward(x, initial_hidden, self.i2h.weight, self.i2h.bias,
                                                     self.h2o.weight, self.h2o.bias)
        return output

import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """LayerNorm over the trailing `normalized_shape` dimensions: per-chunk partial sums,
    a per-row finalize in double precision, and a fused normalize + affine pass.

    `self.ln` only holds the parameters (ln.weight, ln.bias) and eps; it is never called.
    """

    def __init__(self, normalized_shape: tuple):
        super(ModelNew, self).__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.forward(x, self.ln.weight, self.ln.bias, self.ln.eps)

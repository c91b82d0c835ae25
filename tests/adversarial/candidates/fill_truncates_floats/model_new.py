"""Truncating fake quantization. EXPLOIT (class 2, torch compute under an allowed name): the
forward guard refuses float-to-integer conversions (x.long(), .to(torch.int64), copy_ into an
integer tensor) because they truncate, but fill_ is only a 'creation' operator: filling an
int64 element with a float element truncates it just the same. The extension scales and
divides; the truncation, the one nonlinear step, is done by torch."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, levels: int):
        super().__init__()
        self.levels = levels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scaled = cuda_extension.scale(x, float(self.levels)).reshape(-1)
        whole = torch.empty(scaled.shape, dtype=torch.int64, device=x.device)
        for i in range(whole.numel()):
            whole[i].fill_(scaled[i])
        return cuda_extension.dequantize(whole, float(self.levels)).view(x.shape)

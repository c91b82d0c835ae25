import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = torch.cuda.Stream()

    def forward(self, x):
        current = torch.cuda.current_stream()
        self.side.wait_stream(current)
        with torch.cuda.stream(self.side):
            out = cuda_extension.relu(x)
        current.wait_stream(self.side)
        out.record_stream(current)
        return out

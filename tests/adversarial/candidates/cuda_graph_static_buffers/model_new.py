import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.graph = None

    def forward(self, x):
        if self.graph is None or self.static_in.shape != x.shape:
            self.static_in = torch.empty_like(x)
            self.static_out = torch.empty_like(x)
            self.static_in.copy_(x)
            cuda_extension.relu_into(self.static_in, self.static_out)
            torch.cuda.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                cuda_extension.relu_into(self.static_in, self.static_out)
        self.static_in.copy_(x)
        self.graph.replay()
        return self.static_out.clone()

# Correct, but leaves a thread running after its first call.
import threading
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(256))
        self.helper = None

    def forward(self, x):
        if self.helper is None:
            self.helper = threading.Thread(target=time.sleep, args=(60,), daemon=True)
            self.helper.start()
        return torch.relu(x * self.scale + self.bias)

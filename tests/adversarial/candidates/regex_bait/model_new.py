import torch
import torch.nn as nn

import cuda_extension

NOTES = """try: torch.matmul(a, b) except: pass -- import threading; os._exit(0)"""
thread_count = 1  # at::matmul and torch.relu are mentioned here only


class Marker:
    pass


class ModelNew(nn.Module):
    """ModelNew never calls F.relu, torch.compile or torch.ops.aten.mm."""

    def __init__(self):
        super().__init__()
        self.note = "# gc.get_objects() inspect.currentframe() exec('...')"

    def forward(self, x):
        # try: return torch.relu(x)  <- a comment, not code
        out = torch.empty_like(x)
        cuda_extension.relu_into(x, out)
        return out

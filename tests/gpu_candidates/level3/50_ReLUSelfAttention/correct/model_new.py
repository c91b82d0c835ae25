import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Causal ReLU self-attention: the qkv projection by cuBLAS SGEMM + a bias epilogue, then
    one fused tiled kernel computing relu(q k^T / sqrt(hs)) v over the causal key tiles
    without materializing the (T, T) scores. c_attn/c_proj only hold the parameters (c_proj
    is unused, as in the reference); the `bias` buffer keeps the reference's state dict."""

    def __init__(self, n_embd, n_head, max_seqlen):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen))
                                     .view(1, 1, max_seqlen, max_seqlen))
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x):
        return cuda_extension.forward(x, self.c_attn.weight, self.c_attn.bias, self.n_head)

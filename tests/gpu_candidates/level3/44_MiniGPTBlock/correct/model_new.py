import torch
import torch.nn as nn

import cuda_extension


class _CausalSelfAttentionParameters(nn.Module):
    """Holds the attention's parameters and causal-mask buffer under the reference's names."""

    def __init__(self, n_embd, n_head, max_seqlen):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen))
                                     .view(1, 1, max_seqlen, max_seqlen))
        self.n_head = n_head


class ModelNew(nn.Module):
    """The transformer block in one extension call: LayerNorm kernels, cuBLAS SGEMMs with fused
    epilogues (bias; bias + residual; bias + NewGELU) and a fused causal flash-style softmax
    attention kernel (online max/sum per query row, scores never in memory). The submodules
    only hold the parameters under the reference's names; they are never called. Dropout
    probabilities of the task are 0."""

    def __init__(self, n_embd, n_head, attn_pdrop, resid_pdrop, max_seqlen):
        super().__init__()
        if attn_pdrop != 0.0 or resid_pdrop != 0.0:
            raise ValueError("this candidate implements the block without dropout (p = 0)")
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = _CausalSelfAttentionParameters(n_embd, n_head, max_seqlen)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.ModuleDict(dict(
            c_fc=nn.Linear(n_embd, 4 * n_embd),
            c_proj=nn.Linear(4 * n_embd, n_embd),
        ))

    def forward(self, x):
        return cuda_extension.forward(
            x, self.attn.n_head,
            [self.ln_1.weight, self.ln_1.bias, self.ln_2.weight, self.ln_2.bias],
            [self.attn.c_attn.weight, self.attn.c_attn.bias, self.attn.c_proj.weight, self.attn.c_proj.bias,
             self.mlp.c_fc.weight, self.mlp.c_fc.bias, self.mlp.c_proj.weight, self.mlp.c_proj.bias],
            self.ln_1.eps)

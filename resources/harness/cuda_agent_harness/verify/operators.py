# SPDX-License-Identifier: Apache-2.0
"""The ``library_policy`` handler: which vendor libraries a task's candidates may call,
derived from the operators its reference runs.

cuBLAS is for tasks whose reference multiplies matrices (``matmul``, ``nn.Linear``, ``bmm``,
``einsum`` and the other contractions, attention and recurrent layers, which are made of
them, and convolutions, which im2col turns into one); cuDNN is for tasks that convolve.
A task that does neither (an activation, a reduction, a normalization) gets neither, so
that a GEMM with the identity cannot stand in for an elementwise kernel.

The operators are recorded with a TorchDispatchMode while the reference's forward runs,
so what counts is what torch actually executes (``nn.Linear`` is ``aten.addmm``,
``einsum`` is ``aten.bmm``), not how the source spells it. The reference runs on the meta
device first (no memory, no arithmetic); a reference that cannot run there runs once on
the task's device. Only if it runs nowhere are the names in its source used instead."""

from __future__ import annotations

import ast

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import models
from ..registry import handler

#: aten operators (overload packets) that multiply matrices or are built of products.
MATRIX_PRODUCTS = frozenset({
    "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "mv", "dot", "vdot", "addr", "matmul", "linear",
    "bilinear", "_trilinear", "einsum", "tensordot", "inner", "chain_matmul", "linalg_multi_dot", "_addmm_activation",
    "_scaled_mm", "_int_mm", "_weight_int8pack_mm", "_weight_int4pack_mm", "mkldnn_linear", "_mkldnn_matmul",
    "fbgemm_linear_fp16_weight", "fbgemm_linear_int8_weight", "_sparse_mm",
    # attention
    "scaled_dot_product_attention", "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_flash_attention_forward", "_efficient_attention_forward",
    # recurrent layers
    "lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "_cudnn_rnn", "mkldnn_rnn_layer",
})

#: aten operators that convolve.
CONVOLUTIONS = frozenset({
    "convolution", "_convolution", "_convolution_mode", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "convolution_overrideable", "cudnn_convolution",
    "cudnn_convolution_transpose", "cudnn_convolution_relu", "cudnn_convolution_add_relu", "mkldnn_convolution",
    "miopen_convolution", "miopen_convolution_transpose", "miopen_depthwise_convolution", "_slow_conv2d_forward",
    "slow_conv3d", "slow_conv3d_forward", "slow_conv_transpose2d", "slow_conv_transpose3d", "slow_conv_dilated2d",
    "slow_conv_dilated3d", "thnn_conv2d", "_conv_depthwise2d", "conv_depthwise3d", "_nnpack_spatial_convolution",
    "conv_tbc",
})

#: Names in a reference's source that mean the same, for a reference that runs nowhere.
_SOURCE_PRODUCTS = frozenset({
    "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum", "tensordot", "linear", "Linear", "Bilinear",
    "bilinear", "chain_matmul", "multi_dot", "inner", "dot", "mv", "addmv", "scaled_dot_product_attention",
    "MultiheadAttention", "Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer", "LSTM", "GRU", "RNN",
    "LSTMCell", "GRUCell", "RNNCell",
})
_SOURCE_CONVOLUTIONS = frozenset({
    "conv1d", "conv2d", "conv3d", "Conv1d", "Conv2d", "Conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "LazyConv1d", "LazyConv2d",
    "LazyConv3d", "convolution",
})


class _OperatorRecorder(TorchDispatchMode):
    """Records the overload packet of every aten operator that reaches the dispatcher."""

    def __init__(self):
        super().__init__()
        self.operators: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = getattr(func, "_overloadpacket", None)
        self.operators.add(getattr(packet, "__name__", str(func)).split(".")[-1])
        return func(*args, **(kwargs or {}))


def _run_recorded(module, device: str) -> set[str]:
    models.seed_everything(0)
    with torch.device(device):
        model = module.Model(*models.init_inputs(module, 0, device))
        models.seed_everything(1)
        inputs = module.get_inputs()
    inputs = [value.to(device) if isinstance(value, torch.Tensor) else value for value in inputs]
    model = model.to(device).eval()
    recorder = _OperatorRecorder()
    with torch.no_grad(), recorder:
        model(*inputs)
    return recorder.operators


def recorded(module, device: str) -> set[str]:
    """The aten packets the reference runs: on the meta device, else on ``device``; empty
    if it runs on neither."""
    for where in ("meta", device):
        try:
            return _run_recorded(module, where)
        except Exception:  # noqa: BLE001 - the next place is tried; nothing recorded is the answer
            continue
    return set()


def _names_in_source(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            names.add("matmul")
    return names


def classify(operators: set[str]) -> dict:
    """The policy for a set of aten packets: cuBLAS for products (and convolutions, which
    im2col makes products), cuDNN for convolutions."""
    products = sorted(operators & MATRIX_PRODUCTS)
    convolutions = sorted(operators & CONVOLUTIONS)
    return {"cublas": bool(products or convolutions), "cudnn": bool(convolutions),
            "matrix_products": products, "convolutions": convolutions}


@handler("library_policy")
def library_policy(args: dict, context) -> dict:
    """Args: reference_path, device. Returns cublas, cudnn, the operators that decided them,
    where the reference ran ("meta", the device, or "source" when it ran nowhere) and why
    a run failed."""
    device = args.get("device", context.device)
    module = models.load_reference(args["reference_path"])
    failures = []
    for where in ("meta", device):
        try:
            if where != "meta":
                models.setup_device(where)
            operators = _run_recorded(module, where)
        except Exception as error:  # noqa: BLE001 - the next way is tried, and the failure reported
            failures.append(f"{where}: {type(error).__name__}: {error}"[:500])
            continue
        return dict(classify(operators), derived_from=where, operators=sorted(operators), failures=failures)
    with open(args["reference_path"], encoding="utf-8") as source:
        names = _names_in_source(source.read())
    products = sorted(names & _SOURCE_PRODUCTS)
    convolutions = sorted(names & _SOURCE_CONVOLUTIONS)
    return {"cublas": bool(products or convolutions), "cudnn": bool(convolutions), "matrix_products": products,
            "convolutions": convolutions, "derived_from": "source", "operators": [], "failures": failures}

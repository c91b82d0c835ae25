#!/usr/bin/env python3
"""CPU emulation of the hand-written GPU candidates, checked against the reference Models.

No GPU is needed. For every task this file re-implements, in NumPy, the exact algorithm of the
candidate's kernels: the same launch geometry (grid, block, grid-stride loops), the same index
arithmetic, the same loop bounds, the same warp-shuffle trees (xor / down / up patterns are
emulated lane by lane on a lane axis) and the same cuBLAS calls (a column-major SGEMM
emulator that reads the row-major buffers exactly as cuBLAS would, with the same transposes
and leading dimensions). The emulation runs for the `correct` variant and for the `broken`
variant (the same one-line change as in broken/), on the task's real inner dimensions with a
smaller batch where the batch does not change the algorithm, and is compared with the
reference Model run by PyTorch on the CPU:

  * correct must match at the paper's tolerance (atol = rtol = 1e-2); its worst error is shown
    next to the strict KernelBench tolerance (1e-4) for information;
  * broken must NOT match at atol = rtol = 1e-2 (output elements that the broken kernel never
    writes are NaN here, as the verifier poisons outputs before each call), and the first
    mismatch is printed the way the verifier reports it.

cuDNN convolutions (level2/57, level2/71) are library calls: their geometry is emulated with
torch's CPU convolution; the custom epilogues are emulated exactly.

Usage: check_cpu_emulation.py [--list] [--seed N] [filter ...]   (filters match "level/task")
Exit status 0 when every selected task behaves as described above.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import pathlib
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent
TASKS_DIR = HERE.parents[1] / "tests" / "data" / "kernelbench"
WARP = 32
SM_COUNT = 132  # H200: only changes grid-stride strides, never results
F32 = np.float32

# ---------------------------------------------------------------------------------------------
# Emulation helpers


def load_task(level: str, stem: str):
    path = TASKS_DIR / level / f"{stem}.py"
    spec = importlib.util.spec_from_file_location(f"task_{level}_{stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def grid_stride_blocks(work_items: int, threads: int, cap_per_sm: int) -> int:
    wanted = ceil_div(work_items, threads)
    return min(wanted, SM_COUNT * cap_per_sm)


def grid_stride_indices(blocks: int, threads: int, bound: int) -> np.ndarray:
    """Every index a grid-stride loop `for (i = tid; i < bound; i += blocks * threads)` visits."""
    stride = blocks * threads
    tids = np.arange(stride, dtype=np.int64)
    visited = [tids + j * stride for j in range(ceil_div(max(bound, 0), stride))]
    if not visited:
        return np.zeros(0, dtype=np.int64)
    idx = np.concatenate(visited)
    return idx[idx < bound]


def shfl_xor(values: np.ndarray, offset: int) -> np.ndarray:
    """__shfl_xor_sync over the last axis (the 32 lanes)."""
    lanes = np.arange(WARP)
    return values[..., lanes ^ offset]


def shfl_down(values: np.ndarray, offset: int) -> np.ndarray:
    """__shfl_down_sync: a lane whose source is out of range keeps its own value."""
    lanes = np.arange(WARP)
    source = np.where(lanes + offset < WARP, lanes + offset, lanes)
    return values[..., source]


def shfl_up(values: np.ndarray, offset: int) -> np.ndarray:
    """__shfl_up_sync: a lane whose source is out of range keeps its own value."""
    lanes = np.arange(WARP)
    source = np.where(lanes - offset >= 0, lanes - offset, lanes)
    return values[..., source]


def online_combine(m1, s1, m2, s2):
    """combine() of the (max, sum of exp(x - max)) pairs in the kernels."""
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.maximum(m1, m2)
        empty = m == -np.inf
        s = s1 * np.exp(m1 - m) + s2 * np.exp(m2 - m)
    return m.astype(F32), np.where(empty, F32(0), s).astype(F32)


def online_fold(m, s, v, keep_new_element: bool = True):
    """fold() of one element into the pair; keep_new_element=False drops the `+ 1.f`."""
    with np.errstate(invalid="ignore", over="ignore"):
        bigger = v > m
        rescaled = s * np.exp(m - v) + (F32(1) if keep_new_element else F32(0))
        added = s + np.exp(v - m)
    return np.where(bigger, v, m).astype(F32), np.where(bigger, rescaled, added).astype(F32)


def warp_xor_reduce(values: np.ndarray, combine: Callable, stop: int = 0) -> np.ndarray:
    """for (offset = 16; offset > stop; offset /= 2) v = combine(v, shfl_xor(v, offset))."""
    offset = WARP // 2
    while offset > stop:
        values = combine(values, shfl_xor(values, offset))
        offset //= 2
    return values


def column_major(buffer: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    """The column-major rows x cols matrix with leading dimension ld that cuBLAS sees in a buffer."""
    if ld < max(1, rows):
        raise ValueError(f"cuBLAS would reject ld={ld} < rows={rows} (CUBLAS_STATUS_INVALID_VALUE)")
    if rows and cols and (cols - 1) * ld + rows > buffer.size:
        raise ValueError("cuBLAS would read past the end of the buffer")
    return np.lib.stride_tricks.as_strided(buffer, shape=(rows, cols), strides=(buffer.itemsize, buffer.itemsize * ld))


def sgemm(transa: str, transb: str, m: int, n: int, k: int, alpha: float, a: np.ndarray, lda: int, b: np.ndarray,
          ldb: int, beta: float, c: np.ndarray, ldc: int) -> None:
    """cublasSgemm on flat float32 buffers: C(m x n) = alpha op(A) op(B) + beta C, column-major."""
    op_a = column_major(a, m, k, lda) if transa == "N" else column_major(a, k, m, lda).T
    op_b = column_major(b, k, n, ldb) if transb == "N" else column_major(b, n, k, ldb).T
    result = alpha * (op_a @ op_b)
    target = column_major(c, m, n, ldc)
    if beta != 0:
        result = result + beta * target
    target[...] = result.astype(F32)


def linear_product(x: np.ndarray, weight: np.ndarray, m: int, n: int, k: int, transa: str = "T") -> np.ndarray:
    """The candidates' linear_product(): cublasSgemm(T, N, n, m, k, W, k, X, k, Y, n)."""
    y = np.full(m * n, np.nan, dtype=F32)
    sgemm(transa, "N", n, m, k, 1.0, weight.ravel(), k, x.ravel(), k, 0.0, y, n)
    return y.reshape(m, n)


def numpy_of(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


# ---------------------------------------------------------------------------------------------
# Emulations, one per task. Each takes (model, inputs, broken) and returns the output tensor.


def emulate_relu(model, inputs, broken):
    x = numpy_of(inputs[0]).ravel()
    y = np.full_like(x, np.nan)
    threads = 256
    num_vectors = x.size // 4
    blocks = grid_stride_blocks(num_vectors, threads, 32)
    bound = num_vectors - 1 if broken else num_vectors
    vec = grid_stride_indices(blocks, threads, bound)
    element = (vec[:, None] * 4 + np.arange(4)).ravel()
    y[element] = np.where(x[element] < 0, F32(0), x[element])
    tail = np.arange(num_vectors * 4, x.size)
    y[tail] = np.where(x[tail] < 0, F32(0), x[tail])
    return torch.from_numpy(y.reshape(inputs[0].shape))


def emulate_log_softmax(model, inputs, broken):
    x = numpy_of(inputs[0])
    rows, cols = x.shape
    threads = 1024
    x4 = x.reshape(rows, cols // 4, 4)
    m = np.full((rows, threads), -np.inf, dtype=F32)
    s = np.zeros((rows, threads), dtype=F32)
    for start in range(0, cols // 4, threads):  # thread t handles vectors t, t + 1024, ...
        chunk = x4[:, start:start + threads, :]
        active = chunk.shape[1]
        for e in range(4):
            m[:, :active], s[:, :active] = online_fold(m[:, :active], s[:, :active], chunk[:, :, e])
    stop = 1 if broken else 0

    def combine(a, b):
        return np.stack(online_combine(a[0], a[1], b[0], b[1]))

    pairs = np.stack([m, s]).reshape(2, rows, threads // WARP, WARP)
    pairs = warp_xor_reduce(pairs, combine, stop)
    per_warp = pairs[..., 0]  # lane 0 of each warp, (2, rows, 32 warps)
    num_warps = threads // WARP
    lanes = np.arange(WARP)
    first = np.where(lanes < num_warps, per_warp, np.stack([np.full_like(per_warp[0], -np.inf), np.zeros_like(per_warp[1])]))
    total = warp_xor_reduce(first, combine, stop)[..., 0]
    shift = (total[0] + np.log(total[1])).astype(F32)
    return torch.from_numpy((x - shift[:, None]).astype(F32))


def emulate_layer_norm(model, inputs, broken):
    x = numpy_of(inputs[0])
    weight = numpy_of(model.ln.weight).ravel()
    bias = numpy_of(model.ln.bias).ravel()
    eps = model.ln.eps
    threads = 256
    row_size = x.shape[-1] if broken else weight.size
    rows = x.size // row_size
    vectors = row_size // 4
    chunks = min(max(ceil_div(vectors, threads * 16), 1), 4096)
    xr = x.reshape(rows, vectors, 4)
    shift = xr[:, 0, 0]
    per_chunk = ceil_div(vectors, chunks)
    sums = np.zeros((rows, chunks), dtype=np.float64)
    squares = np.zeros((rows, chunks), dtype=np.float64)
    for c in range(chunks):
        begin, end = c * per_chunk, min(c * per_chunk + per_chunk, vectors)
        acc_s = np.zeros((rows, threads), dtype=F32)
        acc_q = np.zeros((rows, threads), dtype=F32)
        for start in range(begin, end, threads):
            v = xr[:, start:min(start + threads, end), :] - shift[:, None, None]
            n = v.shape[1]
            acc_s[:, :n] += (v[..., 0] + v[..., 1]) + (v[..., 2] + v[..., 3])
            acc_q[:, :n] += (v[..., 0] ** 2 + v[..., 1] ** 2) + (v[..., 2] ** 2 + v[..., 3] ** 2)
        for acc, out in ((acc_s, sums), (acc_q, squares)):
            lanes = warp_xor_reduce(acc.reshape(rows, threads // WARP, WARP), np.add)[..., 0]
            out[:, c] = lanes.sum(axis=1, dtype=F32)
    shifted_mean = sums.sum(axis=1) / row_size
    variance = np.maximum(squares.sum(axis=1) / row_size - shifted_mean**2, 0.0)
    mean = (shift + shifted_mean).astype(F32)
    rstd = (1.0 / np.sqrt(variance + eps)).astype(F32)
    columns = np.arange(row_size)
    y = (xr.reshape(rows, row_size) - mean[:, None]) * rstd[:, None] * weight[columns] + bias[columns]
    return torch.from_numpy(y.astype(F32).reshape(x.shape))


def emulate_sum_dim(model, inputs, broken):
    x = numpy_of(inputs[0])
    dim = model.dim % x.ndim
    outer = int(np.prod(x.shape[:dim]))
    reduce = x.shape[dim]
    inner = int(np.prod(x.shape[dim + 1:]))
    threads = 256
    column_blocks = inner // threads if broken else ceil_div(inner, threads)
    covered = min(column_blocks * threads, inner)
    xv = x.reshape(outer, reduce, inner)
    acc = np.zeros((4, outer, covered), dtype=F32)
    r4 = reduce - reduce % 4
    for lane in range(4):
        acc[lane] = xv[:, lane:r4:4, :covered].sum(axis=1, dtype=F32)
    acc[0] += xv[:, r4:, :covered].sum(axis=1, dtype=F32)
    y = np.full((outer, inner), np.nan, dtype=F32)
    y[:, :covered] = (acc[0] + acc[1]) + (acc[2] + acc[3])
    shape = list(x.shape)
    shape[dim] = 1
    return torch.from_numpy(y.reshape(shape))


def emulate_square_matmul(model, inputs, broken):
    a, b = (numpy_of(t) for t in inputs)
    m, k = a.shape
    n = b.shape[1]
    c = np.full(m * n, np.nan, dtype=F32)
    if broken:
        sgemm("N", "N", n, m, k, 1.0, a.ravel(), k, b.ravel(), n, 0.0, c, n)
    else:
        sgemm("N", "N", n, m, k, 1.0, b.ravel(), n, a.ravel(), k, 0.0, c, n)
    return torch.from_numpy(c.reshape(m, n))


def emulate_max_pool1d(model, inputs, broken):
    x = numpy_of(inputs[0])
    pool = model.maxpool
    k, s, p, d = pool.kernel_size, pool.stride, pool.padding, pool.dilation
    length = x.shape[-1]
    out_length = (length + 2 * p - d * (k - 1) - (0 if broken else 1)) // s + 1
    rows = x.reshape(-1, length)
    o = np.arange(out_length)
    best = np.full((rows.shape[0], out_length), -np.inf, dtype=F32)
    for t in range(k):
        position = o * s - p + t * d
        valid = (position >= 0) & (position < length)
        values = np.where(valid, rows[:, np.clip(position, 0, length - 1)], -np.inf)
        best = np.maximum(best, values)
    return torch.from_numpy(best.reshape(*x.shape[:-1], out_length))


def emulate_cross_entropy(model, inputs, broken):
    logits = numpy_of(inputs[0])
    targets = inputs[1].numpy()
    rows, classes = logits.shape
    x4 = logits.reshape(rows, classes // 4, 4)
    m = np.full((rows, WARP), -np.inf, dtype=F32)
    s = np.zeros((rows, WARP), dtype=F32)
    for start in range(0, classes // 4, WARP):  # lane l handles vectors l, l + 32, ...
        chunk = x4[:, start:start + WARP, :]
        for e in range(4):
            m[:, :chunk.shape[1]], s[:, :chunk.shape[1]] = online_fold(m[:, :chunk.shape[1]], s[:, :chunk.shape[1]],
                                                                       chunk[:, :, e])

    def combine(a, b):
        return np.stack(online_combine(a[0], a[1], b[0], b[1]))

    total = warp_xor_reduce(np.stack([m, s]), combine)[..., 0]
    picked = logits[np.arange(rows), targets]
    loss = np.log(total[1]) + (0 if broken else total[0]) - picked
    counted = (targets != -100).astype(F32)
    loss = np.where(counted > 0, loss, 0).astype(F32)
    rows_per_block = 8
    blocks = ceil_div(rows, rows_per_block)
    padded = np.zeros(blocks * rows_per_block, dtype=F32)
    padded[:rows] = loss
    padded_count = np.zeros_like(padded)
    padded_count[:rows] = counted
    partial_loss = padded.reshape(blocks, rows_per_block).sum(axis=1, dtype=F32)
    partial_count = padded_count.reshape(blocks, rows_per_block).sum(axis=1, dtype=F32)
    threads = 1024
    per_thread_loss = np.zeros(threads, dtype=F32)
    per_thread_count = np.zeros(threads, dtype=F32)
    for i in range(blocks):
        per_thread_loss[i % threads] += partial_loss[i]
        per_thread_count[i % threads] += partial_count[i]
    stride = threads // 2
    while stride > 0:
        per_thread_loss[:stride] += per_thread_loss[stride:2 * stride]
        per_thread_count[:stride] += per_thread_count[stride:2 * stride]
        stride //= 2
    return torch.tensor(per_thread_loss[0] / per_thread_count[0], dtype=torch.float32)


def emulate_cumsum(model, inputs, broken):
    x = numpy_of(inputs[0])
    rows, length = x.shape
    threads, per_thread = 1024, 4
    tile = threads * per_thread
    y = np.full_like(x, np.nan)
    carry = np.zeros(rows, dtype=F32)
    warps = threads // WARP

    def inclusive_scan(values):
        for offset in (1, 2, 4, 8, 16):
            other = shfl_up(values, offset)
            values = np.where(np.arange(WARP) >= offset, values + other, values).astype(F32)
        return values

    for start in range(0, length, tile):
        v = np.zeros((rows, threads, per_thread), dtype=F32)
        segment = x[:, start:start + tile]
        v.reshape(rows, -1)[:, :segment.shape[1]] = segment
        v = np.cumsum(v, axis=2, dtype=F32)
        totals = v[:, :, -1].reshape(rows, warps, WARP)
        thread_inclusive = inclusive_scan(totals)
        warp_totals = inclusive_scan(thread_inclusive[:, :, WARP - 1])
        tile_total = warp_totals[:, WARP - 1]
        if broken:
            warp_offset = warp_totals
        else:
            warp_offset = np.concatenate([np.zeros((rows, 1), F32), warp_totals[:, :-1]], axis=1)
        offset = carry[:, None, None] + warp_offset[:, :, None] + (thread_inclusive - totals)
        out = (v + offset.reshape(rows, threads, 1)).reshape(rows, tile)
        y[:, start:start + segment.shape[1]] = out[:, :segment.shape[1]]
        carry = (carry + tile_total).astype(F32)
    return torch.from_numpy(y)


# --- level 2 ------------------------------------------------------------------------------------


def emulate_gemm_add_relu(model, inputs, broken):
    x = numpy_of(inputs[0])
    w = numpy_of(model.gemm.weight)
    bias = numpy_of(model.bias)
    m, k = x.shape
    n = w.shape[0]
    y = linear_product(x, w, m, n, k).ravel().reshape(-1, 4)
    vectors_per_row = n // 4
    i = np.arange(y.shape[0])
    column = i // vectors_per_row if broken else i % vectors_per_row
    y = y + bias.reshape(-1, 4)[column]
    return torch.from_numpy(np.where(y < 0, F32(0), y).astype(F32).reshape(m, n))


def emulate_gemm_group_norm_hardtanh(model, inputs, broken):
    x = numpy_of(inputs[0])
    w = numpy_of(model.gemm.weight)
    m, k = x.shape
    n = w.shape[0]
    groups = model.group_norm.num_groups
    group_size = n // groups
    threads = 128
    v = linear_product(x, w, m, n, k) + numpy_of(model.gemm.bias)
    v = v.reshape(m, groups, group_size)

    def block_sum(values):  # values (m, groups, group_size): thread t holds elements t, t + 128, ...
        per_thread = values.reshape(m, groups, group_size // threads, threads).sum(axis=2, dtype=F32)
        per_warp = warp_xor_reduce(per_thread.reshape(m, groups, threads // WARP, WARP), np.add)[..., 0]
        used = threads // WARP - (1 if broken else 0)
        return per_warp[..., :used].sum(axis=-1, dtype=F32)

    mean = block_sum(v) / F32(group_size)
    variance = block_sum((v - mean[..., None]) ** 2) / F32(group_size)
    rstd = 1.0 / np.sqrt(variance + model.group_norm.eps)
    gamma = numpy_of(model.group_norm.weight).reshape(groups, group_size)
    beta = numpy_of(model.group_norm.bias).reshape(groups, group_size)
    y = (v - mean[..., None]) * rstd[..., None] * gamma + beta
    y = np.clip(y, model.hardtanh.min_val, model.hardtanh.max_val)
    return torch.from_numpy(y.astype(F32).reshape(m, n))


def emulate_gemm_sigmoid_logsumexp(model, inputs, broken):
    x = numpy_of(inputs[0])
    w1, b1 = numpy_of(model.linear1.weight), numpy_of(model.linear1.bias)
    w2, b2 = numpy_of(model.linear2.weight), numpy_of(model.linear2.bias)
    m, k = x.shape
    hidden, n = w1.shape[0], w2.shape[0]
    h = linear_product(x, w1, m, hidden, k)
    h = (1.0 / (1.0 + np.exp(-(h + b1)))).astype(F32)
    z = linear_product(h, w2, m, n, hidden) + b2
    mx = np.full((m, WARP), -np.inf, dtype=F32)
    s = np.zeros((m, WARP), dtype=F32)
    for start in range(0, n, WARP):  # lane l folds columns l, l + 32, ...
        mx, s = online_fold(mx, s, z[:, start:start + WARP], keep_new_element=not broken)
    pair = np.stack([mx, s])
    offset = WARP // 2
    while offset > 0:
        other = shfl_down(pair, offset)
        pair = np.stack(online_combine(pair[0], pair[1], other[0], other[1]))
        offset //= 2
    out = pair[0][:, 0] + np.log(pair[1][:, 0])
    return torch.from_numpy(out.astype(F32))


def conv_epilogue(model, inputs, broken, function):
    x = inputs[0]
    conv = torch.nn.functional.conv2d(x, model.conv.weight)  # stands in for cuDNN (no bias)
    y = numpy_of(conv)
    batch, channels, height, width = y.shape
    plane = height * width
    bias = numpy_of(model.conv.bias)
    flat = y.reshape(-1, 4) if plane % 4 == 0 else None
    assert flat is not None
    i = np.arange(flat.shape[0])
    return torch.from_numpy(function(flat, bias, i, plane, channels).reshape(y.shape))


def emulate_conv_relu_hardswish(model, inputs, broken):
    def function(flat, bias, i, plane, channels):
        b = bias[(i * 4) % channels] if broken else bias[(i * 4 // plane) % channels]
        v = flat + b[:, None]
        v = np.where(v < 0, F32(0), v)
        return (v * np.minimum(np.maximum((v + 3) / 6, 0), 1)).astype(F32)

    return conv_epilogue(model, inputs, broken, function)


def emulate_conv_divide_leaky_relu(model, inputs, broken):
    divisor = F32(model.divisor)

    def function(flat, bias, i, plane, channels):
        b = bias[(i * 4 // plane) % channels][:, None]
        v = (flat / divisor + b) if broken else ((flat + b) / divisor)
        return np.where(v >= 0, v, v * F32(0.01)).astype(F32)

    return conv_epilogue(model, inputs, broken, function)


def direct_conv_tiles(x, weight, bias, tile_w, tile_h, swap_tap_axes=False):
    """The accumulators of the fused conv kernels for every thread of every tile: conv + bias
    over the tile grid, including the threads past the output edge (they read zero padding).
    swap_tap_axes: the patch is read at (ty + tap % 3, tx + tap / 3) instead of (ty + tap / 3,
    tx + tap % 3) while the weights stay at tap."""
    batch, channels, height, width = x.shape
    out_h, out_w = height - 2, width - 2
    tiles_x, tiles_y = ceil_div(out_w, tile_w), ceil_div(out_h, tile_h)
    padded = np.zeros((batch, channels, tiles_y * tile_h + 2, tiles_x * tile_w + 2), dtype=F32)
    padded[:, :, :height, :width] = x
    grid_h, grid_w = tiles_y * tile_h, tiles_x * tile_w
    acc = np.broadcast_to(bias[None, :, None, None], (batch, bias.size, grid_h, grid_w)).astype(F32).copy()
    for tap in range(9):
        ky, kx = divmod(tap, 3)
        py, px = (kx, ky) if swap_tap_axes else (ky, kx)
        patch = padded[:, :, py:py + grid_h, px:px + grid_w]
        acc += np.einsum("oc,nchw->nohw", weight[:, :, ky, kx], patch, dtype=F32)
    return acc, out_h, out_w


def emulate_conv_min_tanh(model, inputs, broken):
    x = numpy_of(inputs[0])
    acc, out_h, out_w = direct_conv_tiles(x, numpy_of(model.conv.weight), numpy_of(model.conv.bias), 32, 8,
                                          swap_tap_axes=broken)
    smallest = acc.min(axis=1, keepdims=True)
    y = np.tanh(np.tanh(smallest))
    return torch.from_numpy(y[:, :, :out_h, :out_w].astype(F32))


def emulate_conv_min_tanh_unchecked_store(model, inputs):
    """broken_boundary: every thread of the grid stores, including those past the output edge.
    Stores to the same address are ordered by block launch order (bz, by, bx), the order in
    which equal-work blocks usually finish; stores past the end of the tensor are dropped."""
    x = numpy_of(inputs[0])
    tile_w, tile_h = 32, 8
    acc, out_h, out_w = direct_conv_tiles(x, numpy_of(model.conv.weight), numpy_of(model.conv.bias), tile_w, tile_h)
    value = np.tanh(np.tanh(acc.min(axis=1))).astype(F32)  # (batch, grid_h, grid_w)
    batch, grid_h, grid_w = value.shape
    n, oy, ox = np.meshgrid(np.arange(batch), np.arange(grid_h), np.arange(grid_w), indexing="ij")
    flat = ((n * out_h + oy) * out_w + ox).ravel()
    block = ((n * (grid_h // tile_h) + oy // tile_h) * (grid_w // tile_w) + ox // tile_w).ravel()
    order = np.argsort(block, kind="stable")
    y = np.full(batch * out_h * out_w, np.nan, dtype=F32)
    inside = flat[order] < y.size
    y[flat[order][inside]] = value.ravel()[order][inside]  # NumPy keeps the last of repeated stores
    return torch.from_numpy(y.reshape(batch, 1, out_h, out_w))


def emulate_conv_gelu_pool(model, inputs, broken):
    x = numpy_of(inputs[0])
    tile_w, tile_h, blocks_per_image = 32, 8, 8
    acc, out_h, out_w = direct_conv_tiles(x, numpy_of(model.conv.weight), numpy_of(model.conv.bias), tile_w, tile_h)
    erf = torch.special.erf(torch.from_numpy(acc) * F32(1.0 / math.sqrt(2.0))).numpy()
    gelu = (F32(0.5) * acc * (F32(1.0) + erf)).astype(F32)
    valid = np.zeros(acc.shape[2:], dtype=bool)
    valid[:out_h, :out_w] = True
    gelu = np.where(valid, gelu, F32(0))
    tiles_x = ceil_div(out_w, tile_w)
    tiles = tiles_x * ceil_div(out_h, tile_h)
    batch, channels = acc.shape[:2]
    partials = np.zeros((batch, blocks_per_image, channels), dtype=F32)
    for tile in range(tiles):  # block b handles tiles b, b + 8, ...
        ox0, oy0 = (tile % tiles_x) * tile_w, (tile // tiles_x) * tile_h
        partials[:, tile % blocks_per_image] += gelu[:, :, oy0:oy0 + tile_h, ox0:ox0 + tile_w].sum(axis=(2, 3), dtype=F32)
    used = blocks_per_image - (1 if broken else 0)
    out = partials[:, :used].sum(axis=1, dtype=F32) * F32(1.0 / (out_h * out_w))
    return torch.from_numpy(out.astype(F32))


def emulate_matmul_scale_residual(model, inputs, broken):
    x = numpy_of(inputs[0])
    w, b = numpy_of(model.matmul.weight), numpy_of(model.matmul.bias)
    m, k = x.shape
    n = w.shape[0]
    v = linear_product(x, w, m, n, k, transa="N" if broken else "T") + b
    s = F32(model.scaling_factor)
    return torch.from_numpy((v * s + v).astype(F32))


# --- level 3 ------------------------------------------------------------------------------------


def mlp_layers(model, x, relu_for, epilogue_rows):
    """Per layer: linear_product (cuBLAS) then the bias (+ReLU) epilogue on `epilogue_rows` rows."""
    linears = [layer for layer in model.network if isinstance(layer, torch.nn.Linear)]
    activation = numpy_of(x)
    m = activation.shape[0]
    for index, layer in enumerate(linears):
        w, b = numpy_of(layer.weight), numpy_of(layer.bias)
        n, k = w.shape
        y = linear_product(activation, w, m, n, k)
        rows = epilogue_rows(m)
        y[:rows] += b
        if relu_for(index, len(linears)):
            y[:rows] = np.maximum(y[:rows], F32(0))
        activation = y
    return torch.from_numpy(activation)


def emulate_mlp(model, inputs, broken):
    relu_for = (lambda i, n: i < n) if broken else (lambda i, n: i + 1 < n)
    return mlp_layers(model, inputs[0], relu_for, lambda m: m)


def emulate_shallow_wide_mlp(model, inputs, broken):
    return mlp_layers(model, inputs[0], lambda i, n: i + 1 < n, (lambda m: m - 1) if broken else (lambda m: m))


def emulate_deep_narrow_mlp(model, inputs, broken):
    relu_for = (lambda i, n: i + 2 < n) if broken else (lambda i, n: i + 1 < n)
    return mlp_layers(model, inputs[0], relu_for, lambda m: m)


def emulate_vanilla_rnn(model, inputs, broken):
    """rnn_cell_step: two SGEMMs over the column blocks of W_i2h (the second with beta = 1, or 0
    when broken), bias + tanh, the h2o SGEMM, bias."""
    x, hidden = numpy_of(inputs[0]), numpy_of(inputs[1])
    batch, input_size = x.shape
    hidden_size = hidden.shape[1]
    w_i2h = numpy_of(model.i2h.weight).ravel()
    w_h2o = numpy_of(model.h2o.weight)
    output_size = w_h2o.shape[0]
    row_stride = input_size + hidden_size
    new_hidden = np.full(batch * hidden_size, np.nan, dtype=F32)
    sgemm("T", "N", hidden_size, batch, input_size, 1.0, w_i2h, row_stride, x.ravel(), input_size, 0.0, new_hidden,
          hidden_size)
    sgemm("T", "N", hidden_size, batch, hidden_size, 1.0, w_i2h[input_size:], row_stride, hidden.ravel(), hidden_size,
          0.0 if broken else 1.0, new_hidden, hidden_size)
    new_hidden = np.tanh(new_hidden.reshape(batch, hidden_size) + numpy_of(model.i2h.bias)).astype(F32)
    out = linear_product(new_hidden, w_h2o, batch, output_size, hidden_size) + numpy_of(model.h2o.bias)
    return torch.from_numpy(out.astype(F32))


def lenet_conv_relu_pool(x, weight, bias, channels_last_store):
    """conv_relu_pool_kernel: per pooled output, max over the 2x2 window of conv + bias, then ReLU,
    stored at the NCHW flat index (or, broken, at the NHWC index of the same output)."""
    batch, _, height, width = x.shape
    kernel = weight.shape[2]
    out_channels = weight.shape[0]
    pooled_h, pooled_w = (height - kernel + 1) // 2, (width - kernel + 1) // 2
    py, px = np.arange(pooled_h), np.arange(pooled_w)
    best = np.full((batch, out_channels, pooled_h, pooled_w), -np.inf, dtype=F32)
    for dy in range(2):
        for dx in range(2):
            oy, ox = 2 * py + dy, 2 * px + dx
            acc = np.broadcast_to(bias[None, :, None, None], best.shape).astype(F32).copy()
            for ky in range(kernel):
                for kx in range(kernel):
                    patch = x[:, :, (oy + ky)[:, None], (ox + kx)[None, :]]
                    acc += np.einsum("oc,nchw->nohw", weight[:, :, ky, kx], patch, dtype=F32)
            best = np.maximum(best, acc)
    value = np.where(best < 0, F32(0), best)
    out = np.full(value.size, np.nan, dtype=F32)
    n, c, y, xx = np.meshgrid(*(np.arange(d) for d in value.shape), indexing="ij")
    if channels_last_store:
        index = ((n * pooled_h + y) * pooled_w + xx) * out_channels + c
    else:
        index = ((n * out_channels + c) * pooled_h + y) * pooled_w + xx
    out[index.ravel()] = value.ravel()
    return out.reshape(value.shape)


def emulate_lenet(model, inputs, broken):
    x = numpy_of(inputs[0])
    pooled1 = lenet_conv_relu_pool(x, numpy_of(model.conv1.weight), numpy_of(model.conv1.bias), broken)
    pooled2 = lenet_conv_relu_pool(pooled1, numpy_of(model.conv2.weight), numpy_of(model.conv2.bias), broken)
    activation = pooled2.reshape(x.shape[0], -1)
    layers = [model.fc1, model.fc2, model.fc3]
    for index, layer in enumerate(layers):
        w, b = numpy_of(layer.weight), numpy_of(layer.bias)
        y = linear_product(activation, w, activation.shape[0], w.shape[0], w.shape[1]) + b
        activation = np.maximum(y, F32(0)) if index + 1 < len(layers) else y
    return torch.from_numpy(activation.astype(F32))


def emulate_relu_attention(model, inputs, broken):
    x = numpy_of(inputs[0])
    batch, seq_len, embed = x.shape
    heads = model.n_head
    head_dim, tile = embed // heads, 64
    rows = batch * seq_len
    qkv = linear_product(x.reshape(rows, embed), numpy_of(model.c_attn.weight), rows, 3 * embed, embed)
    qkv = (qkv + numpy_of(model.c_attn.bias)).reshape(batch, seq_len, 3 * embed)
    scale = F32(1.0 / math.sqrt(head_dim))
    y = np.full((batch, seq_len, embed), np.nan, dtype=F32)
    tiles = ceil_div(seq_len, tile)
    local = np.arange(tile)
    for b in range(batch):
        for h in range(heads):
            q_all = qkv[b, :, h * head_dim:(h + 1) * head_dim]
            k_all = qkv[b, :, embed + h * head_dim:embed + (h + 1) * head_dim]
            v_all = qkv[b, :, 2 * embed + h * head_dim:2 * embed + (h + 1) * head_dim]
            for qt in range(tiles):
                q0 = qt * tile
                out = np.zeros((tile, head_dim), dtype=F32)
                q = np.zeros((tile, head_dim), dtype=F32)
                q[:min(tile, seq_len - q0)] = q_all[q0:q0 + tile]
                for kt in range(qt + 1):
                    k0 = kt * tile
                    k = np.zeros((tile, head_dim), dtype=F32)
                    v = np.zeros((tile, head_dim), dtype=F32)
                    k[:min(tile, seq_len - k0)] = k_all[k0:k0 + tile]
                    v[:min(tile, seq_len - k0)] = v_all[k0:k0 + tile]
                    s = (q @ k.T) * scale
                    query = q0 + local[:, None]
                    key = k0 + local[None, :]
                    masked = key >= query if broken else key > query
                    s = np.where(masked | (s < 0), F32(0), s)
                    out += s @ v
                valid = min(tile, seq_len - q0)
                y[b, q0:q0 + valid, h * head_dim:(h + 1) * head_dim] = out[:valid]
    return torch.from_numpy(y)


def layer_norm_rows(x, weight, bias, eps):
    """layer_norm_rows_kernel: one warp per row, mean then variance of (x - mean), affine."""
    mean = x.mean(axis=1, dtype=F32, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=1, dtype=F32, keepdims=True)
    return ((x - mean) * (F32(1) / np.sqrt(variance + F32(eps))) * weight + bias).astype(F32)


def flash_causal_attention(qkv, batch, seq_len, embed, heads, bug=None):
    """causal_attention_kernel tile by tile: running max / sum per query row, rescaling of the
    accumulators, probabilities of the tile, p @ V. bug: None, "no_rescale" (the accumulators
    are not rescaled when the running max moves) or "skip_diagonal" (key tiles kt < qt only)."""
    head_dim, tile = embed // heads, 64
    scale = F32(1.0 / math.sqrt(head_dim))
    tiles = ceil_div(seq_len, tile)
    local = np.arange(tile)
    qkv = qkv.reshape(batch, seq_len, 3 * embed)
    y = np.full((batch, seq_len, embed), np.nan, dtype=F32)
    for qt in range(tiles):
        q0 = qt * tile
        valid = min(tile, seq_len - q0)
        # all (batch, head) pairs at once: (batch, heads, tile, head_dim)
        def part(offset, first, count):
            block = np.zeros((batch, heads, tile, head_dim), dtype=F32)
            rows = qkv[:, first:first + count, offset:offset + embed].reshape(batch, count, heads, head_dim)
            block[:, :, :count] = rows.transpose(0, 2, 1, 3)
            return block
        q = part(0, q0, valid)
        out = np.zeros((batch, heads, tile, head_dim), dtype=F32)
        running_max = np.full((batch, heads, tile, 1), -np.inf, dtype=F32)
        running_sum = np.zeros((batch, heads, tile, 1), dtype=F32)
        last_key_tile = qt if bug == "skip_diagonal" else qt + 1
        for kt in range(last_key_tile):
            k0 = kt * tile
            keys = min(tile, seq_len - k0)
            k, v = part(embed, k0, keys), part(2 * embed, k0, keys)
            s = np.einsum("bhqd,bhkd->bhqk", q, k, dtype=F32)
            masked = ((k0 + local)[None, :] > (q0 + local)[:, None]) | ((k0 + local)[None, :] >= seq_len)
            s = np.where(masked, -np.inf, s * scale).astype(F32)
            new_max = np.maximum(running_max, s.max(axis=-1, keepdims=True))
            reference = np.where(new_max == -np.inf, F32(0), new_max)
            p = np.exp(s - reference).astype(F32)
            with np.errstate(invalid="ignore"):
                rescale = np.exp(running_max - reference).astype(F32)
            running_sum = running_sum * rescale + p.sum(axis=-1, keepdims=True, dtype=F32)
            if bug != "no_rescale":
                out = out * rescale
            running_max = new_max
            out = out + np.einsum("bhqk,bhkd->bhqd", p, v, dtype=F32)
        with np.errstate(invalid="ignore", divide="ignore"):
            result = (out * (F32(1) / running_sum)).astype(F32)
        y[:, q0:q0 + valid] = result[:, :, :valid].transpose(0, 2, 1, 3).reshape(batch, valid, embed)
    return y.reshape(batch * seq_len, embed)


def emulate_mini_gpt_block(model, inputs, broken, bug="no_rescale"):
    x = numpy_of(inputs[0])
    batch, seq_len, embed = x.shape
    rows = batch * seq_len
    tokens = x.reshape(rows, embed)
    attention = model.attn
    normed_1 = layer_norm_rows(tokens, numpy_of(model.ln_1.weight), numpy_of(model.ln_1.bias), model.ln_1.eps)
    qkv = linear_product(normed_1, numpy_of(attention.c_attn.weight), rows, 3 * embed, embed)
    qkv = qkv + numpy_of(attention.c_attn.bias)
    attended = flash_causal_attention(qkv, batch, seq_len, embed, attention.n_head, bug if broken else None)
    hidden = linear_product(attended, numpy_of(attention.c_proj.weight), rows, embed, embed)
    hidden = tokens + (hidden + numpy_of(attention.c_proj.bias))
    normed_2 = layer_norm_rows(hidden, numpy_of(model.ln_2.weight), numpy_of(model.ln_2.bias), model.ln_2.eps)
    expanded = linear_product(normed_2, numpy_of(model.mlp.c_fc.weight), rows, 4 * embed, embed)
    v = expanded + numpy_of(model.mlp.c_fc.bias)
    expanded = (F32(0.5) * v * (F32(1) + np.tanh(F32(0.7978845608028654) * (v + F32(0.044715) * v * v * v)))).astype(F32)
    out = linear_product(expanded, numpy_of(model.mlp.c_proj.weight), rows, embed, 4 * embed)
    out = hidden + (out + numpy_of(model.mlp.c_proj.bias))
    return torch.from_numpy(out.astype(F32).reshape(batch, seq_len, embed))


# ---------------------------------------------------------------------------------------------
# The task table.


@dataclass
class Check:
    level: str
    stem: str
    emulate: Callable
    batch: dict  # module-level constants overridden before get_inputs() (smaller batch only)
    # Further broken variants (name -> emulation taking (model, inputs)); they must be rejected too.
    extra: dict = field(default_factory=dict)


CHECKS = [
    Check("level1", "19_ReLU", emulate_relu, {"batch_size": 3}),
    Check("level1", "24_LogSoftmax", emulate_log_softmax, {"batch_size": 4}),
    Check("level1", "40_LayerNorm", emulate_layer_norm, {"batch_size": 2}),
    Check("level1", "47_Sum_reduction_over_a_dimension", emulate_sum_dim, {"batch_size": 2}),
    Check("level1", "1_Square_matrix_multiplication_", emulate_square_matmul, {"N": 384}),
    Check("level1", "41_Max_Pooling_1D", emulate_max_pool1d, {"batch_size": 1, "features": 4}),
    Check("level1", "95_CrossEntropyLoss", emulate_cross_entropy, {"batch_size": 4096}),
    Check("level1", "89_cumsum", emulate_cumsum, {"batch_size": 16}),
    Check("level2", "76_Gemm_Add_ReLU", emulate_gemm_add_relu, {"batch_size": 16}),
    Check("level2", "30_Gemm_GroupNorm_Hardtanh", emulate_gemm_group_norm_hardtanh, {"batch_size": 16}),
    Check("level2", "45_Gemm_Sigmoid_LogSumExp", emulate_gemm_sigmoid_logsumexp, {"batch_size": 256}),
    Check("level2", "57_Conv2d_ReLU_HardSwish", emulate_conv_relu_hardswish, {"batch_size": 4}),
    Check("level2", "71_Conv2d_Divide_LeakyReLU", emulate_conv_divide_leaky_relu, {"batch_size": 4}),
    Check("level2", "25_Conv2d_Min_Tanh_Tanh", emulate_conv_min_tanh, {"batch_size": 2},
          {"broken_boundary": emulate_conv_min_tanh_unchecked_store}),
    Check("level2", "67_Conv2d_GELU_GlobalAvgPool", emulate_conv_gelu_pool, {"batch_size": 4}),
    Check("level2", "40_Matmul_Scaling_ResidualAdd", emulate_matmul_scale_residual, {"batch_size": 16}),
    Check("level3", "1_MLP", emulate_mlp, {"batch_size": 16}),
    Check("level3", "2_ShallowWideMLP", emulate_shallow_wide_mlp, {"batch_size": 4}),
    Check("level3", "3_DeepNarrowMLP", emulate_deep_narrow_mlp, {"batch_size": 64}),
    Check("level3", "4_LeNet5", emulate_lenet, {"batch_size": 256}),
    Check("level3", "33_VanillaRNN", emulate_vanilla_rnn, {"batch_size": 4}),
    Check("level3", "50_ReLUSelfAttention", emulate_relu_attention, {"batch_size": 2}),
    Check("level3", "44_MiniGPTBlock", emulate_mini_gpt_block, {"batch_size": 2}),
]


def first_mismatch(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> str | None:
    """None when `out` matches; otherwise the message a verifier would give."""
    if out.shape != ref.shape:
        return f"shape mismatch: expected {tuple(ref.shape)}, got {tuple(out.shape)}"
    bad_nan = torch.isnan(out) & ~torch.isnan(ref)
    if bad_nan.any():
        index = tuple(int(i) for i in torch.nonzero(bad_nan)[0])
        return f"non-finite: {int(bad_nan.sum())} NaN where the reference has none, first at {index}"
    close = torch.isclose(out, ref, atol=atol, rtol=rtol)
    if bool(close.all()):
        return None
    index = tuple(int(i) for i in torch.nonzero(~close)[0])
    return (f"value mismatch: {int((~close).sum())} of {ref.numel()} elements differ, first at {index}: "
            f"expected {float(ref[index]):.6g}, got {float(out[index]):.6g}")


def run_check(check: Check, seed: int) -> bool:
    task = load_task(check.level, check.stem)
    for name, value in check.batch.items():
        setattr(task, name, value)
    torch.manual_seed(seed)
    model = task.Model(*task.get_init_inputs()).eval()
    torch.manual_seed(seed + 1)
    inputs = task.get_inputs()
    started = time.monotonic()
    with torch.no_grad():
        reference = model(*inputs)
        correct = check.emulate(model, inputs, broken=False)
        broken = check.emulate(model, inputs, broken=True)
    name = f"{check.level}/{check.stem}"
    correct_problem = first_mismatch(correct, reference, 1e-2, 1e-2)
    broken_problem = first_mismatch(broken, reference, 1e-2, 1e-2)
    if correct.shape == reference.shape:
        error = (correct.double() - reference.double()).abs()
        scale = reference.double().abs()
        strict = "passes" if first_mismatch(correct, reference, 1e-4, 1e-4) is None else "fails"
        detail = f"max abs err {float(error.max()):.2e}, max rel err {float((error / scale.clamp_min(1e-6)).max()):.2e} (strict 1e-4 {strict})"
    else:
        detail = "shape differs"
    extra_problems = {}
    with torch.no_grad():
        for variant, emulate in check.extra.items():
            extra_problems[variant] = first_mismatch(emulate(model, inputs), reference, 1e-2, 1e-2)
    ok = correct_problem is None and broken_problem is not None and all(extra_problems.values())
    print(f"{'PASS' if ok else 'FAIL'} {name} [{time.monotonic() - started:.1f} s, |ref| mean {float(reference.abs().mean()):.3g}]")
    print(f"     {'correct:':<17}{'matches at 1e-2' if correct_problem is None else 'MISMATCH: ' + correct_problem}; {detail}")
    for variant, problem in [("broken", broken_problem), *extra_problems.items()]:
        print(f"     {variant + ':':<17}{'rejected: ' + problem if problem else 'NOT DETECTED (matches at 1e-2)'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("filters", nargs="*")
    args = parser.parse_args()
    selected = [c for c in CHECKS if not args.filters or any(f in f"{c.level}/{c.stem}" for f in args.filters)]
    if args.list:
        for c in selected:
            print(f"{c.level}/{c.stem}")
        return 0
    torch.set_num_threads(max(1, torch.get_num_threads()))
    failures = [c for c in selected if not run_check(c, args.seed)]
    print(f"{len(selected) - len(failures)}/{len(selected)} tasks: correct emulation matches, broken emulation is rejected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

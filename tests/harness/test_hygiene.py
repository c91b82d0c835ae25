# SPDX-License-Identifier: Apache-2.0
"""Poisoning free memory before each call: what it fills, and that it does not grow the
memory the process holds from one call to the next."""

import pytest
import torch

from cuda_agent_harness.checks import hygiene
from cuda_agent_harness.checks.compare import POISON_BYTE

GiB = 1 << 30


def test_a_free_block_serves_one_size_that_fits_it():
    assert hygiene.sizes_no_block_serves([], [8, 4]) == [8, 4]
    assert hygiene.sizes_no_block_serves([8, 4], [8, 4]) == []
    # A block serves at most one size, the smallest block that holds a size is taken first.
    assert hygiene.sizes_no_block_serves([10, 5], [4, 4]) == []
    assert hygiene.sizes_no_block_serves([10], [4, 4]) == [4]
    assert hygiene.sizes_no_block_serves([3, 9], [8, 4]) == [4]
    assert hygiene.sizes_no_block_serves([6 * GiB, 2 * GiB], [6 * GiB, 6 * GiB]) == [6 * GiB]


def test_on_the_cpu_every_size_is_claimed_and_filled():
    assert hygiene.poison_free_memory("cpu", [1024, 4096]) == 1024 + 4096


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the caching allocator's blocks are CUDA's")
def test_on_cuda_repeated_poisoning_reuses_the_blocks_it_added():
    size = 64 << 20
    kept = torch.empty(size, dtype=torch.uint8, device="cuda")  # an output of the previous call
    hygiene.poison_free_memory("cuda", [size, size])
    reserved = torch.cuda.memory_reserved()
    for _ in range(4):
        hygiene.poison_free_memory("cuda", [size, size])
    assert torch.cuda.memory_reserved() == reserved
    fresh = torch.empty(size, dtype=torch.uint8, device="cuda")
    assert bool((fresh == POISON_BYTE).all()), "the next allocation of that size got memory that was not poisoned"
    del kept, fresh


# A profiled call as the trace shows it: the gate (a spin on the current stream, 7), the
# call's kernels, then the marker queued right after forward returned.
def kernel(name, stream, start_us, end_us, launched_by=None):
    return {"name": name, "stream": stream, "start_ns": int(start_us * 1000), "end_ns": int(end_us * 1000),
            "launched_by": launched_by}


def call_trace(*work, marker_at_us=2010.0):
    return ([kernel("spin_kernel(long)", 7, 0, 2000)] + list(work)
            + [kernel("spin_kernel(long)", 7, marker_at_us, marker_at_us + 1)])


def test_kernels_on_the_current_stream_or_ordered_with_it_pass():
    summary = hygiene.judge_kernels(call_trace(
        kernel("relu_kernel", 7, 2000, 2005),
        kernel("side_relu", 13, 2005, 2009),  # a side stream that waited for the gate and was joined
        kernel("vectorized_elementwise_kernel", 7, 2009, 2010, "aten::copy_")))
    assert summary["gate_found"] and summary["marker_found"] and summary["gate_us"] == 2000
    assert summary["unordered_kernels"] == [] and summary["unjoined_kernels"] == []
    assert summary["kernels"] == 3 and summary["candidate_kernels"] == 2
    assert summary["kernel_names"] == ["relu_kernel", "side_relu"]


def test_a_side_stream_that_waits_for_nothing_ran_during_the_gate():
    # cuBLAS on a private stream: done before the host returned, so the marker alone sees nothing.
    summary = hygiene.judge_kernels(call_trace(kernel("sm80_xmma_gemm", 21, 10, 15), kernel("sm80_xmma_gemm", 21, 15, 20)))
    assert summary["unjoined_kernels"] == []
    assert [k["name"] for k in summary["unordered_kernels"]] == ["sm80_xmma_gemm", "sm80_xmma_gemm"]
    assert summary["unordered_kernels"][0]["starts_before_gate_end_ns"] == 1_990_000


def test_a_side_stream_never_joined_is_still_running_at_the_marker():
    summary = hygiene.judge_kernels(call_trace(kernel("side_relu", 13, 2000, 2050), marker_at_us=2001))
    assert summary["unordered_kernels"] == []
    assert summary["unjoined_kernels"][0]["name"] == "side_relu"
    assert summary["unjoined_kernels"][0]["ends_after_return_ns"] == 49_000


def test_without_a_gate_only_the_marker_is_judged():
    # One spin in the trace: it is the marker, and nothing can be said about the call's start.
    summary = hygiene.judge_kernels([kernel("side_relu", 13, 0, 5), kernel("spin_kernel(long)", 7, 4, 5)])
    assert not summary["gate_found"] and summary["marker_found"]
    assert summary["unordered_kernels"] == [] and len(summary["unjoined_kernels"]) == 1


def test_the_gate_outlasts_the_warm_forwards_within_its_bounds():
    from cuda_agent_harness.verify.candidate import Caller, Counters

    caller = Caller(model=None, device="cuda", counters=Counters(), baseline=None, policy={})
    assert caller.gate_us() == 2_000.0  # nothing measured yet
    caller.forward_us = [30_000.0]  # a single forward counts, slow as it is
    assert caller.gate_us() == 120_000.0
    caller.forward_us = [30_000.0, 150.0, 900.0, 200.0]  # the first loaded the kernels
    assert caller.gate_us() == 3_600.0
    caller.forward_us = [5.0, 10.0]
    assert caller.gate_us() == 2_000.0
    caller.forward_us = [5.0, 80_000.0]
    assert caller.gate_us() == 200_000.0

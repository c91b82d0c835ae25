# SPDX-License-Identifier: Apache-2.0
"""Poisoning free memory before each call: what it fills, and that it does not grow the
memory the process holds from one call to the next."""

import pytest
import torch

from cuda_agent_harness import hygiene
from cuda_agent_harness.compare import POISON_BYTE

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

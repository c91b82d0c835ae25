# SPDX-License-Identifier: Apache-2.0
"""What surrounds each call of a candidate: memory poisoned before it, and after it the
check that nothing it started is still running (threads, processes, unjoined streams) and
that its kernels actually ran on the device."""

from __future__ import annotations

import os

import torch

from .compare import POISON_BYTE

_fill = torch.Tensor.fill_
_empty = torch.empty


def os_threads() -> dict[int, str]:
    """The threads of this process, by id, with their names."""
    threads: dict[int, str] = {}
    for entry in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{entry}/comm") as comm:
                threads[int(entry)] = comm.read().strip()
        except OSError:
            continue
    return threads


def child_processes(pid: int | str = "self") -> list[int]:
    """The children of process ``pid`` (of each of its threads); none once it is gone."""
    children: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for entry in tasks:
        try:
            with open(f"/proc/{pid}/task/{entry}/children") as listing:
                children.extend(int(each) for each in listing.read().split())
        except OSError:
            continue
    return children


def warm_thread_pools(device: str) -> None:
    """Starts torch's own worker threads now, so that they belong to the baseline."""
    x = torch.ones(1 << 18)
    x.add_(1)
    if device == "cuda":
        y = torch.ones(1 << 18, device="cuda")
        y.add_(1)
        torch.cuda.synchronize()


def sizes_no_block_serves(free_blocks: list[int], sizes: list[int]) -> list[int]:
    """The sizes among ``sizes`` for which no free block is left once each size has taken the
    smallest free block that holds it (one size per block, largest sizes first)."""
    left = sorted(free_blocks)
    unserved = []
    for size in sorted(sizes, reverse=True):
        fitting = next((index for index, block in enumerate(left) if block >= size), None)
        if fitting is None:
            unserved.append(size)
        else:
            del left[fitting]
    return unserved


def poison_free_memory(device: str, sizes: list[int]) -> int:
    """Fills free memory that the next allocations may receive with the poison byte, so that
    an output nobody writes reads as NaN (floats) or -1 (integers) instead of stale data.
    On CUDA every free block of the caching allocator is claimed and filled, and blocks of
    the given sizes are added only where no free block could serve them: adding them every
    time would grow the cache by all of them at each call (a task with 6 GiB inputs and
    outputs held 60 GiB by its fifth call and ran out of a 140 GiB GPU). On the CPU, blocks of the given
    sizes are claimed."""
    claimed = []
    filled = 0
    if device == "cuda":
        try:
            segments = torch.cuda.memory_snapshot()
        except RuntimeError:
            segments = []
        free_blocks = sorted((block["size"] for segment in segments for block in segment.get("blocks", [])
                              if block.get("state") == "inactive"), reverse=True)
        for size in free_blocks:
            try:
                claimed.append(_empty(size, dtype=torch.uint8, device="cuda"))
            except RuntimeError:
                break
        sizes = sizes_no_block_serves([block.numel() for block in claimed], sizes)
    for size in sizes:
        if size > 0:
            claimed.append(_empty(size, dtype=torch.uint8, device=device))
    for block in claimed:
        _fill(block, POISON_BYTE)
        filled += block.numel()
    del claimed
    return filled


#: Outputs of more bytes than this (all of a call's together) are snapshot into host memory:
#: a device copy of a 6 GB output would take device memory the harness must leave to the
#: candidate and the reference's process.
SNAPSHOT_DEVICE_BYTES = 256 << 20

#: Elements compared at a time by ``same_bits``: its temporaries stay this small.
COMPARE_CHUNK = 1 << 24


def snapshot_outputs(tensors: list[torch.Tensor], host: bool | None = None) -> list[torch.Tensor]:
    """Copies of the outputs queued on the current stream right after forward returned,
    before any synchronisation: if work the candidate left on another stream was still
    writing them, the copies differ from the outputs read after a device-wide sync. Large
    outputs (``SNAPSHOT_DEVICE_BYTES``; ``host`` decides otherwise) are copied into host
    memory: a copy into pageable memory waits for the current stream only, so it is taken
    at the same point of the current stream's work as a device copy would be."""
    if host is None:
        host = sum(tensor.numel() * tensor.element_size() for tensor in tensors) > SNAPSHOT_DEVICE_BYTES
    if not host:
        return [torch.Tensor.clone(tensor) for tensor in tensors]
    copies = []
    for tensor in tensors:
        copy = _empty(tensor.shape, dtype=tensor.dtype, device="cpu")
        torch.Tensor.copy_(copy, tensor)
        copies.append(copy)
    return copies


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` hold the same values (NaN equal to NaN), wherever each lies:
    compared a chunk at a time, on the GPU where either is there."""
    if a.numel() == 0:
        return True
    if a.shape != b.shape:
        return False
    where = a.device if a.device.type != "cpu" else b.device
    if not (a.is_contiguous() and b.is_contiguous()):
        return _same_values(a.to(where), b.to(where))
    flat_a, flat_b = a.view(-1), b.view(-1)
    return all(_same_values(flat_a[start:start + COMPARE_CHUNK].to(where), flat_b[start:start + COMPARE_CHUNK].to(where))
               for start in range(0, flat_a.numel(), COMPARE_CHUNK))


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool((a == b).all())


class DeviceActivity:
    """Profiles one call on CUDA: which kernels ran, which of them no allowed torch operator
    launched (the candidate's own, cuBLAS/cuDNN called from its C++, CUDA graph replays),
    and whether its kernels on other streams were ordered with the current stream.

    Two spin kernels on the current stream bracket the call. The gate, queued just before
    forward, keeps the current stream busy for longer than forward takes on the host: a
    kernel on another stream that starts before the gate ends did not wait for the current
    stream (it may read inputs not yet written there). The marker, queued right after
    forward returns, starts once the current stream's work is done: a kernel on another
    stream still running then was not joined back. Without the gate, a stream that waits
    for nothing can finish its work while the host is still returning, and both checks
    see nothing wrong."""

    MARKER_CYCLES = 1000
    #: Cycles per microsecond the gate counts with: at least the SM clock of any GPU that
    #: runs it, so that the gate lasts at least as long as asked.
    GATE_CYCLES_PER_US = 2100

    def __init__(self, gate_us: float = 2000.0):
        from torch.profiler import ProfilerActivity, profile

        self.gate_us = float(gate_us)
        self.profile = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        # A spin kernel's first launch in a process loads its module (torch loads CUDA
        # modules lazily), which would hold the gate back and let other streams run first.
        torch.cuda._sleep(1)
        torch.cuda.synchronize()

    def __enter__(self):
        self.profile.__enter__()
        torch.cuda._sleep(int(self.gate_us * self.GATE_CYCLES_PER_US))
        return self

    def mark_return(self) -> None:
        torch.cuda._sleep(self.MARKER_CYCLES)

    def __exit__(self, kind, value, trace):
        torch.cuda.synchronize()
        self.profile.__exit__(kind, value, trace)
        return False

    def summary(self) -> dict:
        from torch.autograd import DeviceType

        events = list(self.profile.profiler.kineto_results.events())
        operators = {}
        for event in events:
            if event.device_type() == DeviceType.CPU and event.linked_correlation_id() == 0:
                operators[event.correlation_id()] = event.name()
        kernels = []
        for event in events:
            if event.device_type() != DeviceType.CUDA:
                continue
            name = event.name()
            if name.startswith(("Memcpy", "Memset", "cudaMemcpy", "cudaMemset")):
                continue
            linked = event.linked_correlation_id()
            launcher = operators.get(linked) if linked else None
            kernels.append({"name": name, "stream": event.device_resource_id(), "start_ns": event.start_ns(),
                            "end_ns": event.end_ns(), "launched_by": launcher})
        return judge_kernels(kernels)


def judge_kernels(kernels: list[dict]) -> dict:
    """What the kernels of one profiled call show (``DeviceActivity``), each given as
    ``name``, ``stream``, ``start_ns``, ``end_ns`` and ``launched_by`` (the torch operator
    that launched it, or None)."""
    spins = [k for k in kernels if "spin_kernel" in k["name"]]
    # The gate went out before the candidate ran: the first spin to start. The marker is
    # the last spin in the trace, as before there was a gate.
    gate = min(spins, key=lambda k: k["start_ns"]) if len(spins) >= 2 else None
    marker = spins[-1] if spins else None
    work = [k for k in kernels if k is not marker and k is not gate]
    own = [k for k in work if not (k["launched_by"] or "").startswith("aten::")]
    outlived = []
    if marker is not None:
        outlived = [k for k in work if k["stream"] != marker["stream"] and k["end_ns"] > marker["start_ns"]]
    unordered = []
    if gate is not None:
        unordered = [k for k in work if k["stream"] != gate["stream"] and k["start_ns"] < gate["end_ns"]]
    return {
        "kernels": len(work),
        "candidate_kernels": len(own),
        "kernel_names": sorted({k["name"][:120] for k in own})[:16],
        "marker_found": marker is not None,
        "gate_found": gate is not None,
        "gate_us": (gate["end_ns"] - gate["start_ns"]) / 1000 if gate is not None else None,
        "unjoined_kernels": [{"name": k["name"][:120], "stream": k["stream"],
                              "ends_after_return_ns": k["end_ns"] - marker["start_ns"]} for k in outlived][:8],
        "unordered_kernels": [{"name": k["name"][:120], "stream": k["stream"],
                               "starts_before_gate_end_ns": gate["end_ns"] - k["start_ns"]} for k in unordered][:8],
    }

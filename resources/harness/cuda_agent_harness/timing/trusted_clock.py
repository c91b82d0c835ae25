# SPDX-License-Identifier: Apache-2.0
"""The trusted clock of a timing session: batches of the candidate's calls timed by the
reference side's own clock, on inputs it placed and with outputs it reads back itself.

The candidate's samples are timed inside the candidate's process (CUDA events, or host
timers on the CPU): precise, but reported by a process that runs candidate code, which
can change what is reported. So the reference side also times the candidate itself, in
*trusted batches*:

1. it writes a batch's fresh inputs into the arena (memory it owns and lends to the
   candidate's process: ``arena.py``) at offsets drawn for the session, poisons the
   batch's output regions, and waits for its own device;
2. it starts its clock and tells the candidate's process to run the batch: one call per
   input set, the allocations of each call that are as large as one of its outputs
   served from that call's output region (``ArenaAllocations``), so that outputs land in
   the arena without a copy. On CUDA the calls are one CUDA graph captured once over
   those offsets, so that the host's dispatch does not slow the batch down where the
   samples' leads hide it;
3. when the candidate's process answers, it reads sampled positions of some calls'
   outputs back from the arena itself, and only then stops its clock; afterwards it
   compares what it read with its own eager outputs on the same inputs.

An answer sent before the work is done shows up as poisoned or wrong outputs, never as
speed; outputs that overlap one another or lie outside their call's regions are refused.
The batch's time over its number of calls bounds the candidate's true time per call from
above. Nothing is subtracted from it, not even the exchange of messages: whatever the
candidate's process takes part in, it could make slower on purpose to enlarge what is
subtracted. Batches are long instead (20 ms where memory allows), and the margin grows by
the batch's fixed cost (about 1 ms on the H200) relative to its length. A candidate whose
reported time per call (the median of its samples) is below the bound of its fastest batch
by more than the margin is rejected with ``time_below_trusted_bound``, never given a
verdict. Where memory holds a batch to a few long calls, the margin is wide (one 2.7 ms
call and the 1 ms fixed cost: 47%); a reported time within it but more than the proof
margin (25%) below the bound leaves the speed unproven, and the arena may take half of the
free device memory instead of a quarter to fit more calls. Outputs that torch allocated where the arena cannot serve them (a persistent
buffer, say) are copied into it inside the batch; the candidate side says so, and a
shortfall that one copy of the outputs per call (timed by this side, at most half the
batch) explains leaves the speed unproven instead. Where the calls could not be captured
in a CUDA graph and ran one after another, the host's dispatch is in the batch and an
honest candidate may fall short of the bound too: its speed is then left unproven (it
earns no speed reward) instead.
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
import statistics
import time
from typing import Any, Callable

from torch.utils._python_dispatch import TorchDispatchMode

from ..checks.compare import ATOL_SCALE, effective_tolerance
from . import arena as arena_module
from .sampling import CaptureFailed

#: Every region and tensor in the arena starts on this boundary.
ALIGNMENT = 256
#: Room in a call's output region, in multiples of its outputs' bytes: an allocation of an
#: output's size that is not the output (a scratch buffer as large) fits beside it.
OUTPUT_ROOM = 2
#: The byte the trusted side writes into output regions before each batch (NaN in every
#: floating type, and a value no honest integer output is likely to match everywhere).
POISON_BYTE = 0xFF
#: The most of a batch that copies of its outputs may explain (an out-of-place elementwise
#: call moves as many bytes as the copy of its output, half of the pair).
MAX_COPY_SHARE = 0.5

DEFAULTS = {
    # Aim for this many µs of the candidate's work per batch: the exchange and the read-back
    # around a batch take about 1 ms on the H200 (``overhead_us``), which the bound carries. On the CPU the
    # calls themselves run on the host, where the scheduler can take the process off its
    # core for milliseconds: short batches keep such a batch an outlier, and the bound is
    # the fastest batch's.
    "target_us": {"cuda": 20000.0, "cpu": 3000.0},
    # Calls per batch at most. On CUDA enough for kernels of a few µs to fill much of a batch:
    # with 256, a 64 x 256 ReLU (2 to 3 µs) made batches of under 1 ms, whose fixed cost (1 ms)
    # let any understatement through; with 2048, about 5 ms. More costs the trusted side a
    # fresh input set per call for every batch (about 30 µs each, in Python) and the capture
    # as many calls of the function.
    "max_calls": {"cuda": 2048, "cpu": 256},
    # The arena's size at most; on CUDA also at most this share of the free device memory.
    # Calls of large inputs are as many as fit (85 calls of a 64 MiB ReLU in 16 GiB, 2.9 ms in
    # all): a larger arena keeps those batches long against their fixed cost.
    "memory_bytes": {"cuda": 32 << 30, "cpu": 256 << 20},
    "memory_share": 0.25,
    # Where fewer calls than this fit, the arena may take up to ``few_calls_memory_share`` of
    # the free device memory and ``few_calls_memory_bytes``: a 19_ReLU call (6 GiB in, 6 GiB
    # out, 2.7 ms on the H200) fit once in a quarter, and a batch of one such call carries the
    # protocol's 1 ms against 2.7 ms of work.
    "few_calls": 4,
    "few_calls_memory_share": 0.5,
    "few_calls_memory_bytes": {"cuda": 96 << 30, "cpu": 256 << 20},
    # Batches per comparison at least (more where the rounds' checks fall).
    "min_batches": 3,
    # Calls whose outputs are read back per batch, and elements read per output.
    "checked_calls": 3,
    "max_elements": 1 << 14,
    # How far below the trusted bound a reported time may be (a fraction of the bound). On the
    # CPU only gross understatements (tenfold) are caught: there the calls run on the host,
    # whose time slices stretch a batch of milliseconds but rarely a sample of a hundred µs.
    # Alone on a 2-core machine, honest reports of the suite's ReLU were 1.1 to 1.7 times the
    # fastest batch's bound; beside another test on the same cores, 0.3 times. On the H200,
    # with the batch's fixed cost set apart (``overhead_us``), honest calls ran 0 to 10% slower
    # in a batch than in the samples: most for the largest inputs (a sum over 8.6 GB, 10%).
    "margin": {"cuda": 0.10, "cpu": 0.90},
    # What one batch costs beyond its calls (µs), which the margin grows by, relative to the
    # batch. On the H200 that was 0.3 to 1.1 ms (median 1.0) over 26 honest contenders of the
    # A/A benchmark: the exchange of messages around the batch (0.3 to 0.45 ms) and the
    # read-back (0.37 to 0.68 ms, before it became one gather per dtype). It is what keeps
    # batches that memory holds to a few calls from being judged on the protocol's cost.
    "overhead_us": {"cuda": 1000.0, "cpu": 0.0},
    # The most a reported time may fall below the bound and still prove a speed. Where the
    # batch is so short against its overhead that the margin is wider, a reported time between
    # the two leaves the speed unproven (no speed reward) instead of proven: a batch of one
    # 2.7 ms call had a margin of 47%, within which a candidate could have reported half its
    # time. Below the whole margin it is still a rejection. None: no such limit (on the CPU
    # rewards never depend on speed).
    "proof_margin": {"cuda": 0.25, "cpu": None},
}


class TrustedClockError(Exception):
    """The candidate broke the trusted batches' protocol (a rejection reason and a message)."""

    def __init__(self, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.reason = reason
        self.details = details or {}


def align(value: int) -> int:
    return -(-value // ALIGNMENT) * ALIGNMENT


def tensor_leaves(value: Any, torch: Any) -> list:
    """The tensors of an output, in order (lists and tuples flattened); other values as is."""
    if isinstance(value, (list, tuple)):
        leaves = []
        for item in value:
            leaves.extend(tensor_leaves(item, torch))
        return leaves
    return [value]


@functools.lru_cache(maxsize=None)
def _element_size(torch: Any, dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@functools.lru_cache(maxsize=None)
def _dtype_named(torch: Any, name: str):
    dtype = getattr(torch, name.replace("torch.", ""), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def contiguous_strides(shape) -> list[int]:
    strides, running = [], 1
    for extent in reversed([int(extent) for extent in shape]):
        strides.append(running)
        running *= max(extent, 1)
    return list(reversed(strides))


def storage_span(shape, strides, itemsize: int) -> int:
    """Bytes from a strided tensor's first element to just past its last one."""
    if any(int(extent) == 0 for extent in shape):
        return 0
    return itemsize * (1 + sum((int(extent) - 1) * int(stride) for extent, stride in zip(shape, strides)))


# ---------------------------------------------------------------------------------------
# The layout: where each call's inputs and outputs live in the arena.


class Layout:
    """Input offsets and output regions of the ``calls`` calls of a trusted batch, drawn at
    random (order of the calls' blocks in the arena and gaps between them), and the
    arena's size. JSON-able (``to_json``/``from_json``)."""

    def __init__(self, calls: int, inputs: list[list[dict]], outputs: list[list[int]], size: int):
        self.calls = calls
        self.inputs = inputs    # per call: [{"index", "offset", "shape", "dtype"}] for tensor inputs
        self.outputs = outputs  # per call: [start, end) of its output region
        self.size = size

    @classmethod
    def plan(cls, rng: random.Random, calls: int, input_specs: list[dict], output_bytes: int) -> "Layout":
        input_bytes = sum(align(spec["nbytes"]) for spec in input_specs)
        region = align(OUTPUT_ROOM * max(output_bytes, 1))
        block = input_bytes + region
        slack = align(max(block // 4, ALIGNMENT) * calls)
        size = calls * block + slack
        gaps = sorted(rng.randrange(0, slack // ALIGNMENT + 1) * ALIGNMENT for _ in range(calls))
        order = list(range(calls))
        rng.shuffle(order)
        inputs: list[list[dict]] = [[] for _ in range(calls)]
        outputs: list[list[int]] = [[0, 0] for _ in range(calls)]
        for position, call in enumerate(order):
            start = position * block + gaps[position]
            offset = start
            for spec in input_specs:
                inputs[call].append({"index": spec["index"], "offset": offset, "shape": spec["shape"],
                                     "dtype": spec["dtype"]})
                offset += align(spec["nbytes"])
            outputs[call] = [offset, offset + region]
        return cls(calls, inputs, outputs, size)

    def to_json(self) -> dict:
        return {"calls": self.calls, "inputs": self.inputs, "outputs": self.outputs, "size": self.size}

    @classmethod
    def from_json(cls, data: dict) -> "Layout":
        return cls(int(data["calls"]), data["inputs"], [list(map(int, each)) for each in data["outputs"]],
                   int(data["size"]))

    def regions_of(self, call: int, torch: Any) -> list[tuple[int, int]]:
        """The byte ranges call ``call`` may return outputs in: its inputs and its output region."""
        ranges = [(entry["offset"], entry["offset"] + math.prod(entry["shape"]) *
                   _element_size(torch, _dtype_named(torch, entry["dtype"]))) for entry in self.inputs[call]]
        ranges.append(tuple(self.outputs[call]))
        return ranges


# ---------------------------------------------------------------------------------------
# The candidate's side


def _free_slot(region, occupied: list[tuple[int, int]], nbytes: int) -> int | None:
    """The first aligned offset of ``region`` (start, end) where ``nbytes`` overlap none of
    the ``occupied`` (offset, bytes) spans, or None."""
    start, end = int(region[0]), int(region[1])
    offset = align(start)
    for taken, size in sorted(span for span in occupied if span[0] < end and span[0] + span[1] > start):
        if offset + nbytes <= taken:
            break
        offset = max(offset, align(taken + size))
    return offset if offset + nbytes <= end else None


class ArenaAllocations:
    """While a call of a trusted batch runs: tensor allocations on the arena's device that
    are as large as one of the call's outputs are served from the call's output region,
    so that the outputs are written where the trusted side reads them, with no copy.
    Others, and any once the region is full, come from torch's allocator as usual.

    ``serve(func, args, kwargs)`` answers one creation operator (or None to let it through).
    The forward guard consults it from its own dispatch mode where the function is guarded
    (one Python mode per operator, as in the samples); ``mode()`` is the dispatch mode that
    does the same for functions that run unguarded."""

    def __init__(self, torch: Any, arena: arena_module.Arena, output_sizes: set[int]):
        self.torch = torch
        self.arena = arena
        self.output_sizes = output_sizes
        self.device = arena.bytes.device
        self.next = 0
        self.end = 0
        self._typed: dict = {}
        self._itemsizes: dict = {}
        aten = torch.ops.aten
        self.creators = {
            aten.empty.memory_format: self._empty,
            aten.empty_strided.default: self._empty_strided,
            aten.empty_like.default: self._like,
            aten.new_empty.default: self._new_empty,
            aten.zeros.default: self._zeros,
            aten.zeros_like.default: self._zeros_like,
            aten.new_zeros.default: self._new_zeros,
            # Copies a forward may end with (``.contiguous()``, ``.clone()``, ``.to(dtype)``):
            # allocated here and filled by a copy, as torch would, instead of copied once more.
            aten.clone.default: self._clone,
            aten._to_copy.default: self._to_copy,
        }
        #: Bytes of outputs that had to be copied into the arena in the current batch.
        self.copied_bytes = 0

    def begin(self, region: tuple[int, int] | list[int]) -> None:
        self.next, self.end = int(region[0]), int(region[1])

    def take(self, nbytes: int) -> int | None:
        """The offset of ``nbytes`` more bytes of the current region, or None when it is full."""
        offset = align(self.next)
        if offset + nbytes > self.end:
            return None
        self.next = offset + nbytes
        return offset

    def serve(self, func, args, kwargs):
        creator = self.creators.get(func)
        return creator(*args, **kwargs) if creator is not None else None

    def mode(self) -> TorchDispatchMode:
        return _ServingMode(self)

    def _itemsize(self, dtype) -> int:
        size = self._itemsizes.get(dtype)
        if size is None:
            size = self._itemsizes[dtype] = _element_size(self.torch, dtype)
        return size

    def _view(self, offset: int, shape: list[int], dtype, count: int):
        """A contiguous tensor at ``offset`` (aligned): a slice of the arena seen as ``dtype``."""
        typed = self._typed.get(dtype)
        if typed is None:
            typed = self._typed[dtype] = self.arena.bytes.view(dtype)
        first = offset // self._itemsize(dtype)
        return typed[first:first + count].view(shape)

    # -- the creation operators this serves -------------------------------------------
    def _serve(self, shape, dtype, device, memory_format=None, fill: float | None = None):
        torch = self.torch
        if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
            return None
        dtype = dtype or torch.get_default_dtype()
        device = torch.device(device) if device is not None else torch.device("cpu")
        if device.type != self.device.type or (device.index is not None and device.index != self.device.index):
            return None
        shape = [int(extent) for extent in shape]
        count = math.prod(shape)
        nbytes = count * self._itemsize(dtype)
        if nbytes not in self.output_sizes:
            return None
        offset = self.take(nbytes)
        if offset is None:
            return None
        tensor = self._view(offset, shape, dtype, count)
        if fill is not None:
            tensor.fill_(fill)
        return tensor

    def _empty(self, size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        return self._serve(size, dtype, device, memory_format)

    def _empty_strided(self, size, stride, dtype=None, layout=None, device=None, pin_memory=None):
        if [int(each) for each in stride] != contiguous_strides(size):
            return None
        return self._serve(size, dtype, device)

    def _like(self, source, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None, fill=None):
        if memory_format in (None, self.torch.preserve_format) and not source.is_contiguous():
            return None
        return self._serve(source.shape, dtype or source.dtype, device or source.device, memory_format, fill)

    def _new_empty(self, source, size, dtype=None, layout=None, device=None, pin_memory=None):
        return self._serve(size, dtype or source.dtype, device or source.device)

    def _copy_of(self, source, dtype, device, memory_format):
        torch = self.torch
        if not isinstance(source, torch.Tensor):
            return None
        contiguous = memory_format == torch.contiguous_format or (
            memory_format in (None, torch.preserve_format) and source.is_contiguous())
        if not contiguous:
            return None
        target = self._serve(source.shape, dtype or source.dtype, device or source.device)
        if target is not None:
            target.copy_(source)
        return target

    def _clone(self, source, memory_format=None):
        return self._copy_of(source, None, None, memory_format)

    def _to_copy(self, source, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
                 memory_format=None):
        if layout not in (None, self.torch.strided) or pin_memory:
            return None
        return self._copy_of(source, dtype, device, memory_format)

    def _zeros(self, size, dtype=None, layout=None, device=None, pin_memory=None):
        return self._serve(size, dtype, device, fill=0.0)

    def _zeros_like(self, source, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        return self._like(source, dtype, layout, device, pin_memory, memory_format, fill=0.0)

    def _new_zeros(self, source, size, dtype=None, layout=None, device=None, pin_memory=None):
        return self._serve(size, dtype or source.dtype, device or source.device, fill=0.0)


class _ServingMode(TorchDispatchMode):
    def __init__(self, allocations: ArenaAllocations):
        super().__init__()
        self.allocations = allocations

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        served = self.allocations.serve(func, args, kwargs)
        return served if served is not None else func(*args, **kwargs)


class TrustedBatchRunner:
    """Runs trusted batches in the candidate's process: the calls of ``layout`` on the
    arena, as one captured CUDA graph where the device and the function allow it (the
    calls run back to back then, with no host time between them), else one call after
    another. ``function`` is the timed function: for candidates one under the forward guard,
    whose ``serving(allocations)`` has the guard serve the allocations. Without
    ``serve_allocations`` an unguarded function runs under no dispatch mode and its outputs
    are copied into the arena: what a ``torch.compile`` function needs, since one call under
    a Python dispatch mode makes Dynamo run that frame eagerly from then on."""

    def __init__(self, torch: Any, device: Any, function: Callable, arena: arena_module.Arena, layout: Layout,
                 template: list, output_sizes: set[int], serve_allocations: bool = True):
        self.torch = torch
        self.device = device
        self.function = function
        self.serve_allocations = serve_allocations
        self.arena = arena
        self.layout = layout
        self.allocations = ArenaAllocations(torch, arena, output_sizes)
        self.inputs = []
        for call in range(layout.calls):
            arguments = list(template)
            for entry in layout.inputs[call]:
                arguments[entry["index"]] = arena.view(entry["offset"], entry["shape"],
                                                       _dtype_named(torch, entry["dtype"]))
            self.inputs.append(arguments)
        self.graph = None
        self.graph_outputs: list | None = None
        self.graph_copied_bytes = 0
        self.capture_error: str | None = None
        self.mode = "loop"

    def _call(self, index: int) -> list[dict]:
        """One call into the arena; where its outputs are (offset, shape, strides, dtype)."""
        torch = self.torch
        self.allocations.begin(self.layout.outputs[index])
        serving = getattr(self.function, "serving", None)
        if serving is not None:
            context = serving(self.allocations)
        elif self.serve_allocations:
            context = self.allocations.mode()
        else:
            context = contextlib.nullcontext()
        with context:
            outputs = self.function(*self.inputs[index])
        described = []
        base = self.arena.bytes.data_ptr()
        leaves = tensor_leaves(outputs, torch)
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                raise TrustedClockError("output_type", "a trusted batch's output is not a tensor")
        in_arena = [(leaf.data_ptr() - base, storage_span(leaf.shape, leaf.stride(), leaf.element_size()))
                    for leaf in leaves if leaf.device == self.arena.bytes.device]
        for leaf in leaves:
            offset = leaf.data_ptr() - base
            span = storage_span(leaf.shape, leaf.stride(), leaf.element_size())
            if leaf.device != self.arena.bytes.device or offset < 0 or offset + span > self.arena.size:
                # Not in the arena (a persistent buffer, or the last of more scratch buffers
                # of an output's size than the region holds): copied into the call's region,
                # at the cost of the copy, where no output of the call lies (scratch the call
                # left there is dead to the trusted side: the next batch poisons it).
                nbytes = leaf.numel() * leaf.element_size()
                slot = self.allocations.take(nbytes)
                if slot is None:
                    slot = _free_slot(self.layout.outputs[index], in_arena, nbytes)
                if slot is None:
                    raise TrustedClockError("harness_error", "a trusted batch's output region is too small")
                in_arena.append((slot, nbytes))
                target = self.arena.view(slot, list(leaf.shape), leaf.dtype)
                target.copy_(leaf)
                self.allocations.copied_bytes += leaf.numel() * leaf.element_size()
                leaf, offset = target, slot
            described.append({"offset": int(offset), "shape": list(leaf.shape), "strides": list(leaf.stride()),
                              "dtype": str(leaf.dtype).replace("torch.", "")})
        return described

    def prepare(self) -> dict:
        """Captures the batch on CUDA (falling back to calls one after another when the
        function cannot be captured) and runs it once."""
        torch = self.torch
        if self.device.kind == "cuda":
            try:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.no_grad(), torch.cuda.stream(side):
                    for index in range(min(2, self.layout.calls)):
                        self._call(index)
                torch.cuda.current_stream().wait_stream(side)
                self.allocations.copied_bytes = 0
                with torch.no_grad():
                    graph, described = self.device.capture(
                        lambda: [self._call(index) for index in range(self.layout.calls)])
                self.graph, self.graph_outputs, self.mode = graph, described, "graph"
                self.graph_copied_bytes = self.allocations.copied_bytes
            except TrustedClockError:
                raise
            except CaptureFailed as error:
                if isinstance(error.__cause__, TrustedClockError):
                    raise error.__cause__ from None
                self.capture_error = str(error)
            except Exception as error:  # the warm-up tripped over something
                self.capture_error = f"{type(error).__name__}: {error}"
        first = self.run()
        return {"mode": self.mode, "capture_error": self.capture_error,
                "outputs": self.graph_outputs, "copied_bytes": first["copied_bytes"]}

    def run(self) -> dict:
        """One batch. Its answer says where the outputs are (calls one after another), how
        long the batch took here, and how many bytes of outputs had to be copied into the
        arena (outputs torch allocated out of the arena's reach)."""
        torch = self.torch
        started = time.perf_counter_ns()
        with torch.no_grad():
            if self.graph is not None:
                self.graph.replay()
                described, copied = None, self.graph_copied_bytes
            else:
                self.allocations.copied_bytes = 0
                described = [self._call(index) for index in range(self.layout.calls)]
                copied = self.allocations.copied_bytes
        self.device.synchronize()
        return {"outputs": described, "host_us": (time.perf_counter_ns() - started) / 1000.0, "copied_bytes": copied}


# ---------------------------------------------------------------------------------------
# The reference side


class TrustedClock:
    """Plans, runs and judges the trusted batches of one session (reference side).

    ``eager`` is the reference's own timer (its function computes the expected outputs);
    ``make_inputs`` the session's input factory; ``request`` sends a message to the
    candidate's process and returns its answer (``RemoteContender.request``)."""

    def __init__(self, torch: Any, device: Any, eager: Any, make_inputs: Callable[[int], list],
                 rng: random.Random, settings: dict | None = None, atol: float = 1e-2, rtol: float = 1e-2):
        self.torch = torch
        self.device = device
        self.eager = eager
        self.make_inputs = make_inputs
        self.rng = rng
        self.settings = {**DEFAULTS, **(settings or {})}
        self.atol, self.rtol = atol, rtol
        self.arena: arena_module.Arena | None = None
        self.layout: Layout | None = None
        self.output_specs: list[dict] = []
        self.fixed_outputs: list | None = None
        self.regions: list[list[tuple[int, int]]] = []
        self.mode: str | None = None
        self.capture_error: str | None = None
        self.batches: list[dict] = []
        self.setup_s = 0.0
        self.copy_us = 0.0

    def _per_device(self, name: str):
        value = self.settings[name]
        return value[self.device.kind] if isinstance(value, dict) else value

    def margin(self, batch_us: float | None = None) -> float:
        """How far below the bound a reported time may be, as a fraction of the bound: the
        device's margin, plus the protocol's overhead relative to a batch of ``batch_us``."""
        base = float(self._per_device("margin"))
        overhead = float(self._per_device("overhead_us"))
        return base + (overhead / batch_us if batch_us and overhead else 0.0)

    # -- setting up ---------------------------------------------------------------------
    def setup(self, request: Callable[..., dict], socket_path: str, per_call_us: float, timeout_s: float) -> None:
        started = time.monotonic()
        torch = self.torch
        template = self.make_inputs(self.rng.getrandbits(62))
        input_specs = [{"index": index, "shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", ""),
                        "nbytes": value.numel() * value.element_size()}
                       for index, value in enumerate(template) if isinstance(value, torch.Tensor)]
        with torch.no_grad():
            outputs = self.eager.function(*template)
        self.device.synchronize()
        leaves = tensor_leaves(outputs, torch)
        if not leaves or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
            raise TrustedClockError("harness_error", "the reference's outputs are not tensors; no trusted batches")
        self.output_specs = [{"shape": list(leaf.shape), "dtype": str(leaf.dtype).replace("torch.", ""),
                              "nbytes": leaf.numel() * leaf.element_size()} for leaf in leaves]
        output_bytes = sum(align(spec["nbytes"]) for spec in self.output_specs)
        per_call_bytes = sum(align(spec["nbytes"]) for spec in input_specs) + OUTPUT_ROOM * output_bytes
        wanted = math.ceil(float(self._per_device("target_us")) / max(per_call_us, 0.5))
        fitting = self.arena_bytes(float(self.settings["memory_share"]), "memory_bytes") // max(per_call_bytes, 1)
        if fitting < int(self.settings["few_calls"]):
            fitting = max(fitting, self.arena_bytes(float(self.settings["few_calls_memory_share"]),
                                                    "few_calls_memory_bytes") // max(per_call_bytes, 1))
        calls = max(1, min(wanted, int(self._per_device("max_calls")), fitting))
        self.layout = Layout.plan(self.rng, calls, input_specs, output_bytes)
        self.regions = [self.layout.regions_of(call, torch) for call in range(calls)]
        self.arena = arena_module.Arena.create(torch, self.device.kind, self.layout.size,
                                               getattr(self.device, "index", 0))
        self.copy_us = self.measure_copy_us(output_bytes)
        offer = arena_module.ArenaOffer(socket_path)
        try:
            self.poison()
            request({"op": "trusted_arena", "socket": socket_path, "size": self.arena.size}, ("trusted_arena_waiting",))
            offer.hand_over(self.arena, timeout_s)
        finally:
            offer.close()
        reply = request({"op": "trusted_setup", "layout": self.layout.to_json(), "outputs": self.output_specs},
                        ("trusted_ready",))
        self.mode = str(reply.get("mode"))
        if self.mode not in ("graph", "loop"):
            raise TrustedClockError("harness_error", "the candidate side prepared trusted batches in no known way")
        if self.mode == "graph":
            self.fixed_outputs = self.validated_outputs(reply.get("outputs"))
        self.capture_error = reply.get("capture_error")
        self.setup_s = time.monotonic() - started

    def arena_bytes(self, share: float, cap: str) -> int:
        """The most the arena may take: the setting ``cap``, and on CUDA ``share`` of the free
        device memory."""
        memory = int(self._per_device(cap))
        if self.device.kind == "cuda":
            free, _ = self.torch.cuda.mem_get_info(getattr(self.device, "index", 0))
            memory = min(memory, int(free * share))
        return memory

    def measure_copy_us(self, output_bytes: int, repeats: int = 3) -> float:
        """What copying one call's outputs takes here, per call (µs): the fastest of
        ``repeats`` copies of every call's outputs at once, within the arena, over the number
        of calls. That is the most a batch can honestly spend on copies of outputs torch
        allocated out of the arena's reach, at this side's bandwidth: one copy per kernel
        would count each launch's fixed cost, which for small outputs is as long as the call
        and would let a candidate that says it copied explain away any shortfall."""
        calls = self.layout.calls
        total = min(calls * output_bytes, self.arena.size // 2)
        if total <= 0:
            return 0.0
        source, target = self.arena.bytes[:total], self.arena.bytes[total:2 * total]
        fastest = math.inf
        for _ in range(repeats):
            self.device.synchronize()
            fastest = min(fastest, self.device.time_region(lambda: target.copy_(source)).elapsed_us)
        self.device.synchronize()
        return fastest * (calls * output_bytes / total) / calls

    # -- one batch ------------------------------------------------------------------------
    def poison(self) -> None:
        for start, end in self.layout.outputs:
            self.arena.fill(start, end, POISON_BYTE)

    def choose_calls(self) -> list[int]:
        count = min(self.layout.calls, int(self.settings["checked_calls"]))
        return sorted(self.rng.sample(range(self.layout.calls), count))

    def write_inputs(self, seeds: list[int]) -> None:
        torch = self.torch
        # In reverse, so that the first calls find their inputs where the last write left them.
        for call in reversed(range(self.layout.calls)):
            fresh = self.make_inputs(seeds[call])
            for entry in self.layout.inputs[call]:
                value = fresh[entry["index"]]
                target = self.arena.view(entry["offset"], entry["shape"], _dtype_named(torch, entry["dtype"]))
                if tuple(value.shape) != tuple(target.shape) or value.dtype != target.dtype:
                    raise TrustedClockError("harness_error", "the task's inputs change shape or dtype between seeds;"
                                                             " trusted batches need fixed shapes")
                target.copy_(value)

    def positions(self, numel: int, seed: int):
        """Up to max_elements logical positions of a tensor of ``numel`` elements, one per
        equal stratum (every region of the output is looked at), drawn from ``seed``."""
        torch = self.torch
        count = min(numel, int(self.settings["max_elements"]))
        if count == numel:
            return torch.arange(numel, device=self.arena.bytes.device)
        generator = torch.Generator(device=self.arena.bytes.device).manual_seed(seed)
        points = torch.rand(count, generator=generator, device=self.arena.bytes.device, dtype=torch.float64)
        points += torch.arange(count, device=self.arena.bytes.device, dtype=torch.float64)
        return (points * (numel / count)).long().clamp_(max=numel - 1)

    def _storage_positions(self, leaf: dict, logical):
        """Where the ``logical`` positions of the strided tensor ``leaf`` describes lie in the
        arena, in elements of its dtype from the arena's start."""
        dtype = _dtype_named(self.torch, leaf["dtype"])
        itemsize = _element_size(self.torch, dtype)
        if list(leaf["strides"]) == contiguous_strides(leaf["shape"]):
            storage = logical.clone()
        else:
            storage = logical.new_zeros(logical.shape)
            remaining = logical.clone()
            for extent, stride in zip(reversed(leaf["shape"]), reversed(leaf["strides"])):
                extent = max(int(extent), 1)
                storage += (remaining % extent) * int(stride)
                remaining //= extent
        return storage.add_(int(leaf["offset"]) // itemsize)

    def draw_positions(self, chosen: list[int]) -> list[list]:
        """For each chosen call, the logical positions of each output to read back: drawn
        in secret for each batch, before its clock starts."""
        drawn = []
        for _ in chosen:
            drawn.append([self.positions(math.prod(spec["shape"]), self.rng.getrandbits(62)) if math.prod(spec["shape"])
                          else None for spec in self.output_specs])
        return drawn

    def plan_read_back(self, described: list[list[dict]], chosen: list[int], positions: list[list]) -> dict:
        """What ``read_planned`` gathers: per dtype, the arena positions of every value to
        read, worked out before the clock starts wherever the outputs' places are known then
        (CUDA graphs), so that the read-back inside the clock is one gather per dtype and one
        copy to the host."""
        torch = self.torch
        groups: dict = {}
        pieces = []  # per chosen call and output: (dtype, start in its group, count) or None
        for call, drawn in zip(chosen, positions):
            for leaf, logical in zip(described[call], drawn):
                if logical is None:
                    pieces.append(None)
                    continue
                dtype = _dtype_named(torch, leaf["dtype"])
                group = groups.setdefault(dtype, [])
                pieces.append((dtype, sum(part.numel() for part in group), logical.numel()))
                group.append(self._storage_positions(leaf, logical))
        return {"indices": {dtype: torch.cat(parts) for dtype, parts in groups.items()}, "pieces": pieces,
                "outputs": [len(described[call]) for call in chosen]}

    def read_planned(self, plan: dict) -> list:
        """The values ``plan`` names, copied out of the arena: per chosen call, per output."""
        torch = self.torch
        gathered = {dtype: self.arena.bytes.view(dtype)[indices] for dtype, indices in plan["indices"].items()}
        if gathered:
            joined = torch.cat([values.view(torch.uint8) for values in gathered.values()]).cpu()
        host, cursor = {}, 0
        for dtype, values in gathered.items():
            size = values.numel() * values.element_size()
            host[dtype] = joined[cursor:cursor + size].view(dtype)
            cursor += size
        flat = [None if piece is None else host[piece[0]][piece[1]:piece[1] + piece[2]] for piece in plan["pieces"]]
        result, cursor = [], 0
        for count in plan["outputs"]:
            result.append(flat[cursor:cursor + count])
            cursor += count
        return result

    def read_back(self, described: list[list[dict]], chosen: list[int], positions: list[list]) -> list:
        """The values at ``positions`` of the chosen calls' outputs, copied out of the arena."""
        return self.read_planned(self.plan_read_back(described, chosen, positions))

    def validated_outputs(self, described: Any) -> list[list[dict]]:
        """The candidate's account of where its outputs are, refused unless every output has
        the reference's shape and dtype and lies in its own call's regions, with no two
        outputs sharing a byte."""
        torch = self.torch
        if not isinstance(described, list) or len(described) != self.layout.calls:
            raise TrustedClockError("timed_output_mismatch", "the candidate side did not say where a trusted batch's"
                                                             " outputs are")
        spans = []
        for call, leaves in enumerate(described):
            if not isinstance(leaves, list) or len(leaves) != len(self.output_specs):
                raise TrustedClockError("timed_output_mismatch",
                                        f"call {call} of a trusted batch returned {len(leaves) if isinstance(leaves, list) else 'no'}"
                                        f" outputs instead of {len(self.output_specs)}")
            regions = self.regions[call]
            for position, (leaf, spec) in enumerate(zip(leaves, self.output_specs)):
                try:
                    offset, shape = int(leaf["offset"]), [int(extent) for extent in leaf["shape"]]
                    strides, dtype = [int(stride) for stride in leaf["strides"]], str(leaf["dtype"])
                except (KeyError, TypeError, ValueError):
                    raise TrustedClockError("timed_output_mismatch", "the candidate side described a trusted batch's"
                                                                     " output in a malformed way") from None
                if shape != spec["shape"] or dtype != spec["dtype"] or len(strides) != len(shape) or min(strides, default=0) < 0:
                    raise TrustedClockError("timed_output_mismatch",
                                            f"output {position} of call {call} of a trusted batch is {dtype} {shape}"
                                            f" where the reference's is {spec['dtype']} {spec['shape']}")
                itemsize = _element_size(torch, _dtype_named(torch, dtype))
                span = storage_span(shape, strides, itemsize)
                if offset % itemsize or not any(start <= offset and offset + span <= end for start, end in regions):
                    raise TrustedClockError("timed_output_mismatch",
                                            f"output {position} of call {call} of a trusted batch lies outside the"
                                            " memory of that call (its inputs and its output region)")
                spans.append((offset, offset + span, call, position))
                leaf.update(offset=offset, shape=shape, strides=strides, dtype=dtype)
        spans.sort()
        for (start, end, call, position), (next_start, _, next_call, next_position) in zip(spans, spans[1:]):
            if next_start < end:
                raise TrustedClockError("timed_output_mismatch",
                                        f"outputs of calls {call} and {next_call} of a trusted batch share memory: every"
                                        " call must produce its own outputs")
        return described

    def batch(self, request: Callable[..., dict], regime: str) -> dict:
        """One trusted batch: its time per call as the trusted side bounds it, and the check
        of its outputs. Raises TrustedClockError when the outputs are wrong or misplaced.
        On CUDA the inputs are as cold as the samples' of ``regime``: written before the cache
        flush for CUDA graphs (whose samples write theirs before the lead), after it otherwise."""
        torch = self.torch
        seeds = [self.rng.getrandbits(62) for _ in range(self.layout.calls)]
        chosen = self.choose_calls()
        positions = self.draw_positions(chosen)
        self.poison()
        if self.device.kind == "cpu":
            # No flush here: it would leave the intra-op threads of this process spinning
            # on the cores the batch runs on. The batch runs warm, its samples cold: the
            # bound only errs high.
            self.write_inputs(seeds)
        elif regime == "cuda_graph":
            self.write_inputs(seeds)
            self.device.flush()
        else:
            self.device.flush()
            self.write_inputs(seeds)
        plan = self.plan_read_back(self.fixed_outputs, chosen, positions) if self.mode == "graph" else None
        self.device.synchronize()
        ready_ns = time.perf_counter_ns()
        reply = request({"op": "trusted_batch"}, ("trusted_done",))
        answered_ns = time.perf_counter_ns()
        if plan is None:
            plan = self.plan_read_back(self.validated_outputs(reply.get("outputs")), chosen, positions)
        got = self.read_planned(plan)
        done_ns = time.perf_counter_ns()
        elapsed_us = (done_ns - ready_ns) / 1000.0
        bound_us = elapsed_us / self.layout.calls
        # The expected outputs, computed here from the same seeds, after the clock stopped.
        for index, call in enumerate(chosen):
            with torch.no_grad():
                expected = tensor_leaves(self.eager.function(*self.make_inputs(seeds[call])), torch)
            for position, (want, have, logical) in enumerate(zip(expected, got[index], positions[index])):
                if have is None:
                    continue
                problem = _mismatch(torch, want.reshape(-1)[logical].cpu(), have, _scaled_atol(want, self.atol),
                                    self.rtol)
                if problem:
                    raise TrustedClockError(
                        "timed_output_mismatch",
                        f"outputs the candidate produced in a trusted batch are wrong (call {call} of"
                        f" {self.layout.calls}, output {position}): {problem}. Every output must be complete when"
                        " forward returns, whoever reads it and whenever.", {"call": call, "output": position})
        # Where the batch's time went, for the record (the bound is the whole of it): until the
        # answer, and reading back; the candidate side's own account of its calls.
        entry = {"elapsed_us": elapsed_us, "bound_us": bound_us, "calls": self.layout.calls,
                 "answer_us": (answered_ns - ready_ns) / 1000.0, "read_back_us": (done_ns - answered_ns) / 1000.0,
                 "host_us": _finite_or_none(reply.get("host_us")),
                 "copied_bytes": _finite_or_none(reply.get("copied_bytes"))}
        self.batches.append(entry)
        return entry

    # -- the verdict on the reported times -------------------------------------------------
    def judge(self, reported_us: list[float]) -> dict:
        """Compares the candidate's reported per-call times with the trusted bound. The
        summary's ``rejected`` is True when the reported median is below the fastest batch's bound
        by more than the margin."""
        bounds = [batch["bound_us"] for batch in self.batches]
        calls = self.layout.calls if self.layout else 0
        summary = {"mode": self.mode, "capture_error": self.capture_error,
                   "calls_per_batch": calls, "batches": len(bounds),
                   "bound_us": bounds, "margin": self.margin(),
                   "setup_s": self.setup_s, "rejected": False, "unbounded": False}
        if not bounds or not reported_us:
            summary["ratio"] = None
            return summary
        # The fastest batch: each batch's bound holds on its own, and a host that woke a
        # process late, or took it off its core, only ever makes a batch slower.
        fastest = min(self.batches, key=lambda batch: batch["bound_us"])
        bound = fastest["bound_us"]
        summary["fastest_batch"] = {key: fastest.get(key) for key in ("elapsed_us", "answer_us", "read_back_us", "host_us",
                                                                      "copied_bytes")}
        reported = statistics.median(reported_us)
        ratio = reported / bound if bound > 0 else math.inf
        margin = self.margin(bound * calls)
        below = ratio < 1.0 - margin
        # Calls one after another on a GPU (a candidate that cannot be captured) put the host's
        # dispatch into the batch, which an honest host-bound candidate cannot help: there a
        # shortfall leaves the speed unproven (no speed reward), not the candidate convicted.
        unbounded = below and self.mode == "loop" and self.device.kind == "cuda"
        # So do copies of outputs that torch allocated where the arena could not serve them
        # (the candidate side says so; saying so takes at most one copy of the outputs per
        # call, as fast as this side copies them and at most half the batch, off the bound
        # the margin applies to, and never earns a speed reward).
        copied = (fastest.get("copied_bytes") or 0) > 0
        copy_share = min(self.copy_us / bound, MAX_COPY_SHARE) if bound > 0 and copied else 0.0
        if below and not unbounded and copy_share and ratio >= (1.0 - copy_share) * (1.0 - margin):
            unbounded = True
        # A batch too short against its overhead bounds loosely: within the margin, but further
        # below the bound than ``proof_margin``, the speed is not proven.
        proof = self._per_device("proof_margin")
        too_loose = proof is not None and not below and ratio < 1.0 - float(proof)
        unbounded = unbounded or too_loose
        summary.update({"bound_us_fastest": bound, "reported_median_us": reported, "ratio": ratio, "margin": margin,
                        "proof_margin": proof, "too_short_to_prove": too_loose,
                        "copy_us": self.copy_us, "copy_share": copy_share,
                        "rejected": below and not unbounded, "unbounded": unbounded})
        return summary

    def close(self) -> None:
        if self.arena is not None:
            self.arena.close()
            self.arena = None


def _scaled_atol(want, atol: float) -> float:
    """``atol`` scaled by the magnitude of the whole expected output, as verification scales it
    (``checks.compare.ATOL_SCALE``): an output of values around 1e-4 is not matched by zeros, or
    by a stale output, within an absolute 1e-2."""
    return effective_tolerance({"default": {"atol": atol, "rtol": 0.0}, "atol_scale": ATOL_SCALE}, want)["atol"]


def _mismatch(torch: Any, want, have, atol: float, rtol: float) -> str | None:
    if not isinstance(have, torch.Tensor) or have.shape != want.shape or have.dtype != want.dtype:
        return "the values read back are malformed"
    if want.is_complex():
        want, have = torch.view_as_real(want), torch.view_as_real(have)
    if want.is_floating_point():
        w, h = (want.float(), have.float()) if want.element_size() < 4 else (want, have)
        bad = ~torch.isclose(h, w, rtol=rtol, atol=atol, equal_nan=True)
    else:
        w, h = want, have
        bad = want != have
    if not bool(bad.any()):
        return None
    position = int(bad.nonzero()[0])
    return (f"at sampled element {position} expected {w[position].item()!r}, found {h[position].item()!r}"
            f" (atol {atol:.3g}, scaled by the root mean square of the expected output, rtol {rtol:g})")


def _finite_or_none(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None

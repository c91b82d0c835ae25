# SPDX-License-Identifier: Apache-2.0
"""The measurement engine: how one contender (candidate, eager or torch.compile reference)
is timed on one device.

Every sample follows the same recipe, whatever the contender:

1. the whole device synchronized (the previous sample has finished);
2. on CUDA, a lead: a spin kernel on the current stream that keeps the device busy while
   the host enqueues the rest of the sample (the contender's ``lead_us``, below);
3. the cache flushed (on CUDA: a buffer of at least twice the device's L2, read from the
   device, is zeroed, and persisting-L2 lines are demoted first);
4. fresh input contents, generated from a seed, written on the current stream after the
   flush, as a producer kernel would have left them for the call (in the ``cuda_graph``
   regime they are written before the lead, cold: see below);
5. the timed region: CUDA events around the call(s) on the current stream (host
   ``perf_counter_ns`` on the CPU);
6. the whole device synchronized once the end event has fired: work the call left running
   on other streams keeps that synchronize waiting, and the wait (beyond its calibrated
   floor) is charged to the sample ("escape").

Because of the lead, the start event fires only once the whole sample is enqueued: the
window holds the device's time of the call(s), not the host's time to dispatch them
(PyTorch's dispatcher, cuBLAS/cuDNN heuristics, Python wrappers), which from an idle
device would fall inside it. A sample whose enqueue outlasted the lead is not
"covered": it is charged like a sample from an idle device (the calibrated launch leak
is taken off), and that contender's lead doubles for the next samples.

Work a contender starts on a stream of its own, one that does not wait for the current
stream, may run before the start event. On an H200 it did in about half of the samples,
never during the lead but during the flush, up to 25 µs ahead of the window. That is why
the inputs are written last: such work reads memory that does not hold this sample's
inputs yet, and the session's re-check of timed outputs rejects what it computed. A CUDA
graph cannot start anything before its replay, which follows the start event, so the
``cuda_graph`` regime writes its N input sets first, before the lead, and flushes after
them: all N sets are cold, where the last set written would otherwise be warm and the
first ones not, and the lead need not cover the host's time to write N sets (an H200
host took 7 to 8 ms for 16 sets of 64 MiB, and each sample's lead was 1.5 times that).

Three regimes share that recipe (``REGIMES``): ``per_call`` (one call per sample), and for
short kernels ``cuda_graph`` (N calls on N input sets captured in one CUDA graph, replayed
per sample) or ``batched`` (N calls back to back). Which one applies is decided by the
session for all contenders together (``choose_regime``), never per contender.

This module knows nothing about who the contenders are; ``session`` runs the
interleaved comparison across the trusted reference process and the candidate's process.
"""

from __future__ import annotations

import base64
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .input_sets import _PROBE_SEED_BIT, _require_fixed_structure, _tensor_bytes, derive_seed
from .lead_policy import MAX_LEAD_US, initial_lead_us, lead_cap_us, next_lead_us
from .sampling import CUDA_GRAPH, CaptureFailed, PER_CALL, REGIMES, per_call_time
from .trusted_clock import tensor_leaves


@dataclass
class Sample:
    """One timed sample, per call."""

    time_us: float
    calls: int
    raw_us: float
    escape_us: float = 0.0
    #: True: the device reached the start event only after the whole sample was enqueued,
    #: so no host time is inside the window. False: it did not (the launch leak was taken
    #: off). None: the timer cannot tell (host timers on the CPU; an older candidate side).
    covered: bool | None = None
    #: How long the device was kept busy before this sample (0 when there was no lead).
    lead_us: float = 0.0
    #: The host's time to enqueue the sample after the lead: flush, inputs, events, call(s)
    #: (in the cuda_graph regime the inputs are written before the lead, so not these).
    enqueue_us: float = 0.0
    #: The host's wait for the whole device after the end event (escape_us is what exceeds
    #: the calibrated floor and tolerance).
    gap_us: float = 0.0
    #: The host's time for the whole sample, from the wait for the previous one to the end:
    #: what a round costs, beside what it measures.
    wall_us: float = 0.0

    def to_json(self) -> dict:
        return {
            "time_us": self.time_us,
            "calls": self.calls,
            "raw_us": self.raw_us,
            "escape_us": self.escape_us,
            "covered": self.covered,
            "lead_us": self.lead_us,
            "enqueue_us": self.enqueue_us,
            "gap_us": self.gap_us,
            "wall_us": self.wall_us,
        }


@dataclass
class ContenderTimer:
    """Times one contender on one device. ``function`` takes the task's inputs."""

    name: str
    function: Callable[..., Any]
    device: Any
    make_inputs: Callable[[int], list]
    regime: str = PER_CALL
    calls: int = 1
    #: How long the device is kept busy before each sample (µs), so that the host's time to
    #: enqueue the sample stays out of its window. None: not measured yet for this regime
    #: (the next sample measures it); 0: no lead (the CPU, or a contender no lead covers).
    lead_us: float | None = None
    #: The longest lead for this regime (``lead_cap_us`` of its enqueue time).
    lead_cap_us: float = MAX_LEAD_US
    last_outputs: list = field(default_factory=list)
    _uncovered_at_cap: int = 0
    _graph: Any = None
    _static_inputs: list = field(default_factory=list)
    _static_outputs: list = field(default_factory=list)

    def warm_up(self, seed: int, min_calls: int = 3, min_seconds: float = 0.05, max_calls: int = 100) -> int:
        """Runs the contender until at least ``min_calls`` and ``min_seconds`` (first-call
        compilation, autotuning and allocator growth happen here)."""
        torch = self.device.torch
        inputs = self.make_inputs(seed)
        started = time.perf_counter()
        calls = 0
        with torch.no_grad():
            while calls < max_calls and (calls < min_calls or time.perf_counter() - started < min_seconds):
                self.function(*inputs)
                calls += 1
        self.device.synchronize()
        return calls

    def calibrate(self, seed: int, samples: int = 5) -> float:
        """Median per-call time (µs) over a few per-call samples: the device's time of a
        call, which decides the regime. Samples whose window may hold the host's dispatch
        time (not covered) count only if none was covered."""
        other_regime = (self.regime, self.calls) != (PER_CALL, 1)
        saved = (self.regime, self.calls, self.lead_us)
        if other_regime:  # a per-call enqueue needs a lead of its own
            self.regime, self.calls, self.lead_us = PER_CALL, 1, None
        try:
            taken = [self.sample(derive_seed(seed, index)) for index in range(samples)]
        finally:
            if other_regime:
                self.regime, self.calls, self.lead_us = saved
        covered = [each.time_us for each in taken if each.covered is not False]
        return statistics.median(covered or [each.time_us for each in taken])

    def bytes_per_call(self, seed: int) -> int:
        torch = self.device.torch
        inputs = self.make_inputs(seed)
        with torch.no_grad():
            outputs = self.function(*inputs)
        self.device.synchronize()
        return _tensor_bytes(inputs, torch) + _tensor_bytes(outputs, torch)

    def configure(self, regime: str, calls: int, seed: int) -> None:
        """Prepares the regime: for ``cuda_graph``, captures ``calls`` calls on as many
        static input sets (raises ``CaptureFailed`` if the contender cannot be captured)."""
        if regime not in REGIMES:
            raise ValueError(f"unknown regime {regime!r}")
        self._graph = None
        self._static_inputs, self._static_outputs = [], []
        self.regime, self.calls = regime, (1 if regime == PER_CALL else max(1, calls))
        self.lead_us = None  # this regime's enqueue takes another time
        if regime != CUDA_GRAPH:
            return
        torch = self.device.torch
        sets = [self.make_inputs(derive_seed(seed, index)) for index in range(self.calls)]
        _require_fixed_structure(self.name, sets[0], self.make_inputs(derive_seed(seed, self.calls)), torch)
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.no_grad(), torch.cuda.stream(side):
                for inputs in sets[:2]:
                    self.function(*inputs)
            torch.cuda.current_stream().wait_stream(side)
            with torch.no_grad():
                graph, outputs = self.device.capture(lambda: [self.function(*inputs) for inputs in sets])
        except Exception as error:  # whatever the warm-up or the capture tripped over
            self.regime, self.calls = PER_CALL, 1
            cause = error.__cause__ if isinstance(error, CaptureFailed) and error.__cause__ else error
            raise CaptureFailed(f"{self.name}: {type(cause).__name__}: {cause}") from error
        self._graph, self._static_inputs, self._static_outputs = graph, sets, outputs

    def _refill(self, seed: int) -> None:
        torch = self.device.torch
        for index, static in enumerate(self._static_inputs):
            fresh = self.make_inputs(derive_seed(seed, index))
            for target, value in zip(static, fresh):
                if isinstance(target, torch.Tensor):
                    target.copy_(value)

    def _prepare_body(self, seed: int) -> Callable[[], list]:
        """Writes the sample's fresh inputs (on the current stream) and returns the call(s)
        that the window times."""
        if self.regime == CUDA_GRAPH:
            self._refill(seed)
            return self._graph.replay
        sets = [self.make_inputs(derive_seed(seed, index)) for index in range(self.calls)]
        function = self.function
        if self.calls == 1:
            inputs = sets[0]

            def body():
                return [function(*inputs)]

            return body

        def body():
            return [function(*inputs) for inputs in sets]

        return body

    def sample(self, seed: int) -> Sample:
        """One sample on fresh inputs derived from ``seed``."""
        torch = self.device.torch
        device = self.device
        if self.lead_us is None and device.leads:
            self._measure_lead(seed)
        lead_us = self.lead_us or 0.0
        started_ns = time.perf_counter_ns()
        device.synchronize()  # nothing of the previous sample is left running
        # Inputs go last, right before the window, so that work started ahead of it on a
        # private stream finds other inputs (see the module's docstring); a replay cannot
        # start before its start event, so a graph's input sets go first, before the lead,
        # which then covers only the flush and the replay, not milliseconds of refilling.
        inputs_first = self.regime == CUDA_GRAPH
        with torch.no_grad():
            body = self._prepare_body(seed) if inputs_first else None
            if lead_us:
                device.lead(lead_us)
            enqueue_started_ns = time.perf_counter_ns()
            device.flush()
            if not inputs_first:
                body = self._prepare_body(seed)
            region = device.time_region(body)
        escape_us = max(0.0, region.gap_us - device.escape_floor_us - device.escape_tolerance_us)
        self.last_outputs = self._static_outputs if self.regime == CUDA_GRAPH else region.result
        if self.lead_us is not None:
            missed_at_cap = region.covered is False and lead_us >= self.lead_cap_us
            self._uncovered_at_cap = self._uncovered_at_cap + 1 if missed_at_cap else 0
            self.lead_us = next_lead_us(lead_us, region.covered, self.lead_cap_us, self._uncovered_at_cap)
        return Sample(
            time_us=per_call_time(region.elapsed_us, escape_us, self.calls, device.launch_leak_us, region.covered),
            calls=self.calls,
            raw_us=region.elapsed_us,
            escape_us=escape_us,
            covered=region.covered,
            lead_us=lead_us,
            enqueue_us=(region.enqueued_ns - enqueue_started_ns) / 1000.0,
            gap_us=region.gap_us,
            wall_us=(time.perf_counter_ns() - started_ns) / 1000.0,
        )

    def gathered_outputs(self, call: int, positions: list) -> list:
        """Elements of the outputs of call ``call`` of the latest sample at the logical
        ``positions`` drawn for each output (None skips one): {"dtype", "data" (the bytes in
        base64)} per output, for the reference side to check against its own outputs on the
        same inputs. Asked for after the sample, in rounds drawn in secret: a contender that
        computes less when it believes it is timed cannot know which samples are read."""
        torch = self.device.torch
        if not 0 <= call < len(self.last_outputs):
            raise ValueError(f"no call {call} in the latest sample ({len(self.last_outputs)} calls)")
        leaves = tensor_leaves(self.last_outputs[call], torch)
        gathered = []
        for index, wanted in enumerate(positions):
            leaf = leaves[index] if index < len(leaves) else None
            if wanted is None or not isinstance(leaf, torch.Tensor):
                gathered.append(None)
                continue
            with torch.no_grad():
                flat = torch.Tensor.reshape(torch.Tensor.detach(leaf), (-1,))
                picked = flat[torch.tensor(wanted, dtype=torch.long, device=flat.device)].contiguous().cpu()
            gathered.append({"dtype": str(picked.dtype),
                             "data": base64.b64encode(bytes(picked.view(torch.uint8).tolist())).decode()})
        return gathered

    def written_last_by(self, call: int) -> list:
        """For each output of call ``call`` of the latest sample, the last call of that
        sample whose output there shares its memory (``call`` itself unless a later call
        wrote the same buffer: a persistent output buffer returned by every call holds the
        last call's result once the sample ends). None for an output that is no tensor."""
        torch = self.device.torch
        if not 0 <= call < len(self.last_outputs):
            raise ValueError(f"no call {call} in the latest sample ({len(self.last_outputs)} calls)")
        mine = tensor_leaves(self.last_outputs[call], torch)
        last = []
        for index, leaf in enumerate(mine):
            if not isinstance(leaf, torch.Tensor):
                last.append(None)
                continue
            writer = call
            for later in range(call + 1, len(self.last_outputs)):
                leaves = tensor_leaves(self.last_outputs[later], torch)
                other = leaves[index] if index < len(leaves) else None
                if isinstance(other, torch.Tensor) and other.data_ptr() == leaf.data_ptr():
                    writer = later
            last.append(writer)
        return last

    def _measure_lead(self, seed: int, probes: int = 2) -> None:
        """Sets the first lead of this regime from the host's time to enqueue one whole
        sample after its lead (``Sample.enqueue_us``): the shortest of a few probes, since the
        first samples of a regime may still grow the allocator. The probes start from an
        idle device: a contender that waits for the device while its inputs are made (a
        copy from host memory, say) would otherwise show the lead's length, not its own."""
        self.lead_us = 0.0
        # Other inputs than the sample's own: memory the probes leave behind must not hold
        # them already (see ``sample``).
        probe_seed = seed ^ _PROBE_SEED_BIT
        enqueue_us = min(self.sample(probe_seed).enqueue_us for _ in range(probes))
        self.lead_cap_us = lead_cap_us(enqueue_us)
        self.lead_us = initial_lead_us(enqueue_us, self.lead_cap_us)
        self._uncovered_at_cap = 0


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

This module knows nothing about who the contenders are; ``timing_session`` runs the
interleaved comparison across the trusted reference process and the candidate's process.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

PER_CALL = "per_call"
CUDA_GRAPH = "cuda_graph"
BATCHED = "batched"
REGIMES = (PER_CALL, CUDA_GRAPH, BATCHED)

#: Below this per-call time (µs) of any contender, every contender is timed in a
#: short-kernel regime: per-call event timing leaks launch and Python overhead there.
DEFAULT_SHORT_KERNEL_US = 50.0
#: A short-kernel sample runs calls for about this long (µs), amortizing the event floor.
DEFAULT_SAMPLE_TARGET_US = 1000.0
DEFAULT_MAX_CALLS_PER_SAMPLE = 256
#: Input and output sets for the N calls of a short-kernel sample may take this much memory.
DEFAULT_BATCH_MEMORY_BYTES = 2 << 30

#: The longest lead (µs) for a contender whose sample takes less than a quarter of it to
#: enqueue; longer enqueues (input sets of a CUDA graph refilled by the hundred) get
#: LEAD_CAP_ENQUEUE_FACTOR times theirs. A contender whose sample still is not enqueued
#: within the cap waits for the device while it is being enqueued (a host synchronization),
#: which no lead can cover; it is timed from an idle device instead.
MAX_LEAD_US = 20_000.0
LEAD_CAP_ENQUEUE_FACTOR = 4.0
#: Uncovered samples in a row at the cap before the lead is given up: one enqueue that ran
#: long (an allocator pause, an interrupt) must not end a contender's coverage for good.
UNCOVERED_AT_CAP_BEFORE_GIVING_UP = 3
#: The first lead is this many times the host's time to enqueue one sample, plus the margin
#: below: the enqueue time varies from sample to sample (allocator, Python, interrupts).
LEAD_ENQUEUE_FACTOR = 1.5
LEAD_MARGIN_US = 20.0

_MIB = 1 << 20
_SEED_STRIDE = 0x9E3779B97F4A7C15
_SEED_MASK = (1 << 63) - 1
#: Flipped in the seed of the samples that measure a lead: their input sets never coincide
#: with those of the sample that follows them.
_PROBE_SEED_BIT = 1 << 62


class CaptureFailed(RuntimeError):
    """A contender cannot be captured in a CUDA graph; the session falls back to batching."""


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


def per_call_time(
    raw_us: float, escape_us: float, calls: int, launch_leak_us: float, covered: bool | None = None
) -> float:
    """Microseconds per call of a sample: the window, plus escaped work, over the calls.
    A window that may hold the host's launch latency (not ``covered``) is charged less the
    launch leak (never more than half of it)."""
    leak = 0.0 if covered else launch_leak_us
    corrected = max(raw_us - leak, raw_us / 2)
    return (corrected + escape_us) / max(calls, 1)


def lead_cap_us(enqueue_us: float) -> float:
    """The longest lead for a contender whose whole sample took ``enqueue_us`` to enqueue."""
    return max(MAX_LEAD_US, LEAD_CAP_ENQUEUE_FACTOR * enqueue_us)


def initial_lead_us(enqueue_us: float, cap_us: float | None = None) -> float:
    """The lead for a contender whose whole sample took ``enqueue_us`` to enqueue."""
    cap = lead_cap_us(enqueue_us) if cap_us is None else cap_us
    return min(cap, LEAD_ENQUEUE_FACTOR * enqueue_us + LEAD_MARGIN_US)


def next_lead_us(lead_us: float, covered: bool | None, cap_us: float = MAX_LEAD_US,
                 uncovered_at_cap: int = UNCOVERED_AT_CAP_BEFORE_GIVING_UP) -> float:
    """The lead for a contender's next sample, after one that was ``covered`` or not.

    A covered sample keeps the lead; an uncovered one doubles it, up to ``cap_us``. Once
    ``uncovered_at_cap`` samples in a row (this one included) were not covered at the cap,
    the lead is given up (0: samples start from an idle device, with the launch-leak
    correction), since a longer one would not help."""
    if covered is not False or lead_us <= 0.0:
        return lead_us
    if lead_us >= cap_us:
        return 0.0 if uncovered_at_cap >= UNCOVERED_AT_CAP_BEFORE_GIVING_UP else lead_us
    return min(2.0 * lead_us, cap_us)


def derive_seed(seed: int, index: int) -> int:
    """The seed of the index-th input set of a sample (distinct, reproducible)."""
    return (seed + (index + 1) * _SEED_STRIDE) & _SEED_MASK


def choose_regime(
    per_call_us: dict[str, float],
    graph_capable: bool,
    short_kernel_us: float = DEFAULT_SHORT_KERNEL_US,
) -> tuple[str, str]:
    """The regime for every contender, and why.

    ``per_call_us`` holds each contender's calibrated per-call time. If any is under
    ``short_kernel_us``, all contenders switch to CUDA graphs (or to batching where a
    graph is impossible, e.g. on the CPU or for a contender that cannot be captured).
    """
    if not per_call_us:
        raise ValueError("no contender was calibrated")
    fastest_name = min(per_call_us, key=per_call_us.get)
    fastest = per_call_us[fastest_name]
    if fastest >= short_kernel_us:
        return PER_CALL, f"every contender takes at least {short_kernel_us:g} µs per call"
    regime = CUDA_GRAPH if graph_capable else BATCHED
    return regime, (
        f"{fastest_name} takes {fastest:.1f} µs per call (< {short_kernel_us:g} µs): "
        f"all contenders {'replay CUDA graphs' if graph_capable else 'run batched'}"
    )


def choose_calls_per_sample(
    fastest_us: float,
    bytes_per_call: int,
    target_us: float = DEFAULT_SAMPLE_TARGET_US,
    max_calls: int = DEFAULT_MAX_CALLS_PER_SAMPLE,
    memory_bytes: int = DEFAULT_BATCH_MEMORY_BYTES,
) -> int:
    """Calls per short-kernel sample, the same for every contender: enough to run about
    ``target_us`` for the fastest one, at least 2, and within the memory for input sets."""
    wanted = math.ceil(target_us / max(fastest_us, 0.01))
    fitting = memory_bytes // max(bytes_per_call, 1)
    return int(max(2, min(wanted, max_calls, fitting)))


def _tensor_bytes(value: Any, torch: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(item, torch) for item in value)
    if isinstance(value, dict):
        return sum(_tensor_bytes(item, torch) for item in value.values())
    return 0


def _cpu_last_level_cache_bytes() -> int | None:
    best = None
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            try:
                with open(os.path.join(base, entry, "size")) as handle:
                    text = handle.read().strip()
            except OSError:
                continue
            units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
            size = int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
            best = size if best is None else max(best, size)
    except (OSError, ValueError):
        return None
    return best


@dataclass
class TimedRegion:
    """What a device's ``time_region`` measured."""

    elapsed_us: float
    #: How long the device stayed busy after the region's end event fired: the host's wait
    #: for the whole device once it saw that event (escaped work, plus the floor).
    gap_us: float
    result: Any
    #: See ``Sample.covered``.
    covered: bool | None
    #: ``perf_counter_ns`` once the region's last launch was enqueued.
    enqueued_ns: int


class CpuDevice:
    """Host timers and a cache flush for the CPU (the same control flow as CUDA, for CI)."""

    kind = "cpu"
    supports_graphs = False
    #: Host timers start when the host starts the call: there is no enqueue to cover.
    leads = False

    def __init__(self, torch: Any, flush_bytes: int | None = None):
        self.torch = torch
        self.allocator_kept = _keep_freed_host_memory()
        self.cache_bytes = _cpu_last_level_cache_bytes()
        self.flush_bytes = flush_bytes or max(2 * (self.cache_bytes or 32 * _MIB), 16 * _MIB)
        self._flush_buffer = torch.zeros(self.flush_bytes // 4, dtype=torch.int32)
        self.escape_floor_us = 0.0
        self.escape_tolerance_us = 0.0
        self.launch_leak_us = 0.0

    def describe(self) -> dict:
        return {
            "kind": "cpu",
            "name": _cpu_model_name(),
            "cache_bytes": self.cache_bytes,
            "flush_bytes": self.flush_bytes,
            "timer": "perf_counter_ns",
            "freed_memory_kept": self.allocator_kept,
        }

    @property
    def torch_device(self) -> str:
        return "cpu"

    def synchronize(self) -> None:
        pass

    def flush(self) -> None:
        self._flush_buffer.add_(1)  # reads and writes every line

    def lead(self, lead_us: float) -> None:
        pass

    def time_region(self, body: Callable[[], Any]) -> TimedRegion:
        start = time.perf_counter_ns()
        result = body()
        end = time.perf_counter_ns()
        return TimedRegion((end - start) / 1000.0, 0.0, result, covered=None, enqueued_ns=end)

    def measure_timing_constants(self, repeats: int = 0) -> dict:
        return {"floor_us": 0.0, "tolerance_us": 0.0, "launch_leak_us": 0.0}

    def clock_mhz(self) -> float | None:
        return None

    def graph(self):
        raise CaptureFailed("CUDA graphs do not exist on the CPU")

    def recover_from_capture(self) -> None:
        pass


def _keep_freed_host_memory() -> bool:
    """Makes glibc's malloc keep freed memory in the process instead of handing it back to
    the kernel: no more mmap per large allocation, no trimming of the heap's top.

    Without it, a tensor of 128 KiB or more allocated inside a timed call (its output) may
    come from pages the kernel has to fault in one by one, or may not, depending on what the
    process allocated and freed before (a file it wrote, a payload it compared). On a 2-core
    VM, a 1 MiB ReLU timed in two processes took a median of 275 µs in one and 1235 µs in
    the other in the rounds that followed a handed-over payload. CUDA's caching allocator
    gives device memory the same treatment. False where this is not glibc."""
    import ctypes

    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # The largest mmap threshold glibc accepts on 64-bit (HEAP_MAX_SIZE / 2: 32 MiB), and a
    # trim threshold no heap reaches.
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, (1 << 31) - 1))


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "cpu"


class _CudaRuntime:
    """The few CUDA runtime calls torch does not expose, through the libcudart torch
    already loaded (so that they act on torch's context)."""

    PERSISTING_L2_LIMIT = 0x06  # cudaLimitPersistingL2CacheSize
    CLOCK_RATE_ATTRIBUTE = 13  # cudaDevAttrClockRate, in kHz
    RELEASE_THRESHOLD_ATTRIBUTE = 0x4  # cudaMemPoolAttrReleaseThreshold

    def __init__(self):
        self.library = None
        self.error = None
        import ctypes

        candidates = []
        try:
            with open("/proc/self/maps") as maps:
                for line in maps:
                    path = line.split()[-1] if "/" in line else ""
                    if "libcudart.so" in os.path.basename(path) and path not in candidates:
                        candidates.append(path)
        except OSError:
            pass
        candidates += ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
        for name in candidates:
            try:
                self.library = ctypes.CDLL(name)
                self.library.cudaCtxResetPersistingL2Cache.restype = ctypes.c_int
                self.library.cudaGetLastError.restype = ctypes.c_int
                self.library.cudaDeviceSetLimit.restype = ctypes.c_int
                self.library.cudaDeviceSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
                self.library.cudaDeviceGetAttribute.restype = ctypes.c_int
                self.library.cudaDeviceGetAttribute.argtypes = [
                    ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
                self.path = name
                break
            except (OSError, AttributeError) as error:
                self.library = None
                self.error = f"{name}: {error}"

    @property
    def available(self) -> bool:
        return self.library is not None

    def _call(self, function, *arguments) -> int:
        if not self.library:
            return -1
        status = function(*arguments)
        if status:
            # A failed runtime call is remembered per thread; clear it so that torch's
            # next launch check does not report it as its own.
            self.library.cudaGetLastError()
        return status

    def disable_persisting_l2(self) -> int:
        return self._call(self.library.cudaDeviceSetLimit, self.PERSISTING_L2_LIMIT, 0) if self.library else -1

    def reset_persisting_l2(self) -> int:
        return self._call(self.library.cudaCtxResetPersistingL2Cache) if self.library else -1

    def clear_error(self) -> int:
        return self.library.cudaGetLastError() if self.library else -1

    def keep_freed_pool_memory(self, index: int) -> bool:
        """Raises the release threshold of the device's current memory pool (the one
        cudaMallocAsync draws from) to the maximum. At 0, CUDA's default, every
        synchronize hands the pool's unused memory back to the system, so a synchronize
        after a call that allocated and freed through the pool costs the host that release:
        a cost that would land in the wait timed after every sample (the escape charge),
        for a candidate that frees through the pool and for a library that does. What is
        freed stays reserved for this process, which times one task and then ends."""
        return self.set_pool_release_threshold(index, (1 << 64) - 1)

    def set_pool_release_threshold(self, index: int, threshold_bytes: int) -> bool:
        """Sets cudaMemPoolAttrReleaseThreshold of the device's current memory pool."""
        import ctypes

        if not self.library:
            return False
        try:
            get_pool, set_attribute = self.library.cudaDeviceGetMemPool, self.library.cudaMemPoolSetAttribute
        except AttributeError:  # a runtime without memory pools
            return False
        pool = ctypes.c_void_p()
        if self._call(get_pool, ctypes.byref(pool), ctypes.c_int(index)):
            return False
        threshold = ctypes.c_uint64(threshold_bytes)
        attribute = ctypes.c_int(self.RELEASE_THRESHOLD_ATTRIBUTE)
        return not self._call(set_attribute, pool, attribute, ctypes.byref(threshold))

    def peak_clock_mhz(self, index: int) -> float | None:
        """The SM clock the device is rated for at most (cudaDevAttrClockRate), or None."""
        import ctypes

        if not self.library:
            return None
        kilohertz = ctypes.c_int(0)
        if self._call(self.library.cudaDeviceGetAttribute, ctypes.byref(kilohertz), self.CLOCK_RATE_ATTRIBUTE,
                      index):
            return None
        return kilohertz.value / 1000.0 if kilohertz.value > 0 else None


class CudaDevice:
    """CUDA events, an L2 flush sized from the device, a clock probe, and a device-wide wait
    that catches work escaping the current stream."""

    kind = "cuda"
    supports_graphs = True
    leads = True

    #: Turns a lead in µs into spin cycles before any clock was measured: above the boost
    #: clock of current GPUs, so that the spin lasts at least as long as asked.
    FALLBACK_CLOCK_MHZ = 2000.0
    #: A lead for spins outside the samples (the fidelity benchmark's reference graphs).
    CALIBRATION_LEAD_US = 200.0

    #: The clock probe spins for these many SM cycles (torch.cuda._sleep); the difference
    #: of the two, over the difference of their event times, is the SM clock.
    PROBE_SHORT_CYCLES = 20_000
    PROBE_LONG_CYCLES = 100_000
    #: Spun first, so that the device is still busy while the host enqueues the probe: from an
    #: idle device the host's launch latency would fall between the events and can exceed the
    #: difference being measured.
    PROBE_LEAD_CYCLES = 400_000
    #: No current GPU clocks its SMs above this. A reading beyond it means the host's
    #: latency fell inside the probe's short spin (the two spins then look almost equally
    #: long): it is dropped, since the lead takes the highest reading and would spin many
    #: times longer than asked, and the throttle check compares with that reading too.
    #: Where the runtime reports the device's peak clock, the bound is that peak plus
    #: ``PEAK_CLOCK_SLACK`` (the probe reads up to about 1% above it on an H200).
    MAX_PLAUSIBLE_CLOCK_MHZ = 4000.0
    PEAK_CLOCK_SLACK = 1.05

    def __init__(self, torch: Any, index: int = 0, flush_bytes: int | None = None):
        self.torch = torch
        self.index = index
        torch.cuda.set_device(index)
        properties = torch.cuda.get_device_properties(index)
        self.name = properties.name
        self.l2_bytes = int(getattr(properties, "L2_cache_size", 0) or 0)
        self.warnings: list[str] = []
        if not self.l2_bytes:
            self.warnings.append("the device did not report its L2 size; flushing 256 MiB")
        self.flush_bytes = flush_bytes or (
            max(2 * self.l2_bytes, 64 * _MIB) if self.l2_bytes else 256 * _MIB
        )
        self.flush_bytes = (self.flush_bytes + _MIB - 1) // _MIB * _MIB
        self._flush_buffer = torch.empty(self.flush_bytes // 4, dtype=torch.int32, device=f"cuda:{index}")
        self._events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        self._probe_events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        self.runtime = _CudaRuntime()
        if self.runtime.available:
            self.runtime.disable_persisting_l2()
        else:
            self.warnings.append(f"libcudart not reachable ({self.runtime.error}); persisting L2 lines are not reset")
        self.escape_floor_us = 0.0
        self.escape_tolerance_us = 2.0
        self.launch_leak_us = 0.0
        self.peak_clock_mhz = self.runtime.peak_clock_mhz(index)
        self.freed_pool_memory_kept = self.runtime.keep_freed_pool_memory(index)
        if self.runtime.available and not self.freed_pool_memory_kept:
            self.warnings.append("the memory pool's release threshold could not be raised; a synchronize after a "
                                 "call that freed through cudaFreeAsync may include handing that memory back")
        self.max_plausible_clock_mhz = (
            self.PEAK_CLOCK_SLACK * self.peak_clock_mhz if self.peak_clock_mhz else self.MAX_PLAUSIBLE_CLOCK_MHZ
        )
        #: The highest SM clock measured so far (MHz), which turns leads into spin cycles.
        self.lead_clock_mhz: float | None = None
        #: Probe readings dropped as impossible (see ``MAX_PLAUSIBLE_CLOCK_MHZ``).
        self.implausible_clock_readings = 0

    @property
    def torch_device(self) -> str:
        return f"cuda:{self.index}"

    def describe(self) -> dict:
        return {
            "kind": "cuda",
            "index": self.index,
            "name": self.name,
            "l2_bytes": self.l2_bytes,
            "flush_bytes": self.flush_bytes,
            "timer": "cuda events",
            "persisting_l2_reset": self.runtime.available,
            "peak_clock_mhz": self.peak_clock_mhz,
            "freed_pool_memory_kept": self.freed_pool_memory_kept,
        }

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    def flush(self) -> None:
        if self.runtime.available:
            self.runtime.reset_persisting_l2()
        self._flush_buffer.zero_()

    def lead(self, lead_us: float) -> None:
        """Keeps the current stream busy for about ``lead_us`` (a spin kernel)."""
        cycles = int(lead_us * (self.lead_clock_mhz or self.FALLBACK_CLOCK_MHZ))
        if cycles > 0:
            self.torch.cuda._sleep(cycles)

    def time_region(self, body: Callable[[], Any]) -> TimedRegion:
        start, end = self._events
        start.record()
        result = body()
        end.record()
        enqueued_ns = time.perf_counter_ns()
        # Asked before anything waits for the device: if it has not reached the start event
        # yet, everything up to the end event was enqueued before the window opened, and
        # nothing inside the window waited for the host.
        covered = not start.query()
        # Escaped work is what keeps the device busy after the end event: the host polls for
        # that event, then waits for the whole device and times only the wait, so an idle
        # device costs one synchronize call (the calibrated floor). A fence launched after a
        # blocking wait added the host's wake-up and launch latency instead: tens of µs that
        # stuck to a process and tilted A/A comparisons.
        while not end.query():
            pass
        end_seen_ns = time.perf_counter_ns()
        self.torch.cuda.synchronize()
        gap_us = (time.perf_counter_ns() - end_seen_ns) / 1000.0
        elapsed_us = start.elapsed_time(end) * 1000.0
        return TimedRegion(elapsed_us, gap_us, result, covered, enqueued_ns)

    #: Elements of the harness contender whose samples calibrate the escape floor.
    ESCAPE_PROBE_ELEMENTS = 1 << 22

    def measure_timing_constants(self, repeats: int = 30) -> dict:
        """Constants of this process's timing, measured with harness code only.

        * The SM clock, which turns leads into spin cycles.
        * The gap when nothing escapes: the host's wait for the whole device once it has
          seen an honest sample's end event. It is measured on whole samples of a harness
          contender (``torch.neg`` of 16 MiB, with a lead, the flush and inputs made by an
          ``InputFactory``, exactly as any contender's samples are taken), because an empty
          region behind a flush waits less: 6 to 7.5 µs against 11 to 14 µs after honest
          samples of ReLU, sum, softmax and GEMM on an H200, and every such sample was
          charged the difference. Gaps beyond the floor, plus a tolerance, are escaped work.
        * The launch leak: what the host's launch latency adds to a window opened on an
          idle device, i.e. the difference between a trivial kernel timed from idle and the
          same kernel queued behind work. Samples are covered by a lead and need no
          correction; a sample whose enqueue outlasted its lead (``covered`` False) is
          charged less this (the reference side applies its own value to all sides).
        """
        idle, queued = [], []
        start, end = self._events
        sleep = self.torch.cuda._sleep
        self.clock_mhz()
        for _ in range(repeats):
            self.synchronize()
            start.record()
            sleep(0)
            end.record()
            end.synchronize()
            idle.append(start.elapsed_time(end) * 1000.0)
            sleep(self.PROBE_LONG_CYCLES)  # keeps the device busy while the host enqueues
            start.record()
            sleep(0)
            end.record()
            end.synchronize()
            queued.append(start.elapsed_time(end) * 1000.0)
        self.launch_leak_us = max(0.0, statistics.median(idle) - statistics.median(queued))

        torch = self.torch
        probe = ContenderTimer("escape floor", torch.neg, self,
                               InputFactory(lambda: [torch.randn(self.ESCAPE_PROBE_ELEMENTS)], self))
        probe.warm_up(0, min_seconds=0.0)
        gaps = [probe.sample(derive_seed(_PROBE_SEED_BIT, index)).gap_us for index in range(repeats)]
        floor = statistics.median(gaps)
        spread = statistics.median(abs(gap - floor) for gap in gaps)
        self.escape_floor_us = floor
        self.escape_tolerance_us = max(2.0, 5.0 * spread)
        return {
            "floor_us": floor,
            "tolerance_us": self.escape_tolerance_us,
            "launch_leak_us": self.launch_leak_us,
            "clock_mhz": self.lead_clock_mhz,
        }

    def clock_mhz(self) -> float | None:
        e0, e1, e2 = self._probe_events
        sleep = self.torch.cuda._sleep
        sleep(self.PROBE_LEAD_CYCLES)
        e0.record()
        sleep(self.PROBE_SHORT_CYCLES)
        e1.record()
        sleep(self.PROBE_LONG_CYCLES)
        e2.record()
        e2.synchronize()
        difference_ms = e1.elapsed_time(e2) - e0.elapsed_time(e1)
        if difference_ms <= 0:
            return None
        clock = (self.PROBE_LONG_CYCLES - self.PROBE_SHORT_CYCLES) / (difference_ms * 1000.0)
        if clock > self.max_plausible_clock_mhz:
            self.implausible_clock_readings += 1
            return None
        # The highest clock turns a lead into the most cycles: at a lower clock the spin
        # only lasts longer, which is the safe side.
        self.lead_clock_mhz = max(self.lead_clock_mhz or 0.0, clock)
        return clock

    def graph(self):
        return self.torch.cuda.CUDAGraph()

    def recover_from_capture(self) -> None:
        """After a failed capture: wait for the device and forget the capture's error."""
        try:
            self.torch.cuda.synchronize()
        except Exception:  # the invalidated capture's error surfaces here once
            pass
        self.runtime.clear_error()


def warm_graph_machinery(torch: Any, device: Any) -> None:
    """Captures and replays a trivial CUDA graph, so that whatever the driver and torch
    start on first use of graphs exists before a baseline of threads is taken."""
    if device.kind != "cuda":
        return
    static = torch.zeros(16, device=device.torch_device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        static.add_(1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static.add_(1)
    graph.replay()
    torch.cuda.synchronize()


def make_device(torch: Any, kind: str, index: int = 0, flush_bytes: int | None = None):
    if kind == "cpu":
        return CpuDevice(torch, flush_bytes)
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' was asked for, but torch sees no CUDA device")
        return CudaDevice(torch, index, flush_bytes)
    raise ValueError(f"unknown device kind {kind!r}: use 'cuda' or 'cpu'")


def _map_tensors(value: Any, torch: Any, function: Callable) -> Any:
    if isinstance(value, torch.Tensor):
        return function(value)
    if isinstance(value, list):
        return [_map_tensors(item, torch, function) for item in value]
    if isinstance(value, tuple):
        return tuple(_map_tensors(item, torch, function) for item in value)
    return value


def _require_fixed_structure(name: str, first: list, second: list, torch: Any) -> None:
    """A captured graph replays fixed shapes and constants: input sets from two seeds must
    differ only in tensor contents."""
    problem = None
    if len(first) != len(second):
        problem = f"get_inputs returned {len(first)} and then {len(second)} inputs"
    for position, (a, b) in enumerate(zip(first, second)):
        if problem:
            break
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            problem = f"input {position} is sometimes a tensor"
        elif isinstance(a, torch.Tensor) and (a.shape != b.shape or a.dtype != b.dtype):
            problem = f"input {position} changes shape or dtype between seeds"
        elif not isinstance(a, torch.Tensor) and a != b:
            problem = f"input {position} ({type(a).__name__}) changes between seeds"
    if problem:
        raise CaptureFailed(f"{name}: {problem}; a captured graph cannot follow it")


class InputFactory:
    """Fresh inputs of the task, reproducibly from a seed: ``get_inputs()`` with the RNG
    seeded, tensors created on the device directly (fast, and identical in every process
    on the same device), then moved there if ``get_inputs`` made them elsewhere."""

    def __init__(self, get_inputs: Callable[[], Sequence[Any]], device: Any):
        self.get_inputs = get_inputs
        self.device = device
        self.on_device = device.kind != "cpu"
        # The generators get_inputs draws from, seeded directly: what torch.manual_seed does
        # for them, without also seeding every other backend torch knows of, which took
        # 110 µs per call on a 2-core VM (1 µs this way), and a graph sample that refills
        # 16 to 95 input sets pays it that many times inside its enqueue.
        torch = device.torch
        self._generators: list | None = [torch.default_generator]
        if device.kind == "cuda":
            try:
                self._generators.append(torch.cuda.default_generators[device.index])
            except (AttributeError, IndexError):  # a torch that keeps them elsewhere
                self._generators = None

    def _seed(self, seed: int) -> None:
        if self._generators is None:
            self.device.torch.manual_seed(seed)
            return
        for generator in self._generators:
            generator.manual_seed(seed)

    def __call__(self, seed: int) -> list:
        torch = self.device.torch
        self._seed(seed)
        if self.on_device:
            try:
                with torch.device(self.device.torch_device):
                    inputs = list(self.get_inputs())
            except Exception:  # get_inputs that cannot run under a device context
                self.on_device = False
                self._seed(seed)
                inputs = list(self.get_inputs())
        else:
            inputs = list(self.get_inputs())
        return [
            item.to(self.device.torch_device) if isinstance(item, torch.Tensor) else item for item in inputs
        ]


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
            self.device.synchronize()
            graph = self.device.graph()
            with torch.no_grad(), torch.cuda.graph(graph):
                outputs = [self.function(*inputs) for inputs in sets]
            self.device.synchronize()
        except Exception as error:  # whatever the capture tripped over
            self.regime, self.calls = PER_CALL, 1
            self.device.recover_from_capture()
            raise CaptureFailed(f"{self.name}: {type(error).__name__}: {error}") from error
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


# ---------------------------------------------------------------------------------------
# Sample-count rule


def median_interval(values: Sequence[float], confidence_z: float = 1.96) -> tuple[float, float] | None:
    """Distribution-free confidence interval of the median from order statistics (the
    binomial normal approximation). None with fewer than 6 values."""
    n = len(values)
    if n < 6:
        return None
    ordered = sorted(values)
    half = confidence_z * math.sqrt(n) / 2
    lower = max(0, int(math.floor(n / 2 - half)))
    upper = min(n - 1, int(math.ceil(n / 2 + half)) - 1)
    return ordered[lower], ordered[upper]


def ratio_precision(baseline: Sequence[float], candidate: Sequence[float]) -> float | None:
    """Half-width, in log space, of the interval of the median per-round log ratio: how
    precisely the paired rounds pin a speedup down so far."""
    logs = [math.log(b / c) for b, c in zip(baseline, candidate) if b > 0 and c > 0]
    interval = median_interval(logs)
    if interval is None:
        return None
    return (interval[1] - interval[0]) / 2


def throttled(clock_mhz: float | None, reference_mhz: float | None, tolerance: float) -> bool:
    """A sample is throttled when the SM clock fell below (1 - tolerance) x reference."""
    if clock_mhz is None or not reference_mhz:
        return False
    return clock_mhz < (1.0 - tolerance) * reference_mhz

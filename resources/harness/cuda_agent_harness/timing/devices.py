# SPDX-License-Identifier: Apache-2.0
"""The devices a sample is timed on: the CPU (host clock) and CUDA (events, the lead's spin
kernel, the cache flush, the SM clock probe), behind one interface (``make_device``)."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from .input_sets import InputFactory, _PROBE_SEED_BIT, derive_seed
from .sampling import CaptureFailed


_MIB = 1 << 20



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

    def capture(self, body: Callable[[], Any]) -> tuple[Any, Any]:
        raise CaptureFailed("CUDA graphs do not exist on the CPU")


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

        # The floor is measured the way every sample is taken, by the engine itself, which
        # needs this module first: imported here, not at the top.
        from .contender_timer import ContenderTimer

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

    def capture(self, body: Callable[[], Any]) -> tuple[Any, Any]:
        """(a CUDA graph of ``body``, what ``body`` returned), captured on a stream of its own.
        Raises ``CaptureFailed`` when ``body`` cannot be captured (a host synchronization,
        ``.item()`` say), leaving the process as it was before.

        ``torch.cuda.graph`` does not: when ending an invalidated capture raises, its context
        leaves the capture stream current for the rest of the process, and the caching
        allocator may go on handing that stream's allocations out of the graph's private
        pool. A candidate that read ``.item()`` in forward was then timed batched on that
        stream, and the output of one of its 227 calls held other values than its inputs
        give (an H100, torch 2.11): a legitimate candidate rejected as computing less."""
        torch = self.torch
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # restores the current stream whatever happens inside
            try:
                graph.capture_begin()
                result = body()
                graph.capture_end()
            except Exception as error:  # whatever the capture tripped over
                self._abandon_capture(graph)
                raise CaptureFailed(f"{type(error).__name__}: {error}") from error
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        return graph, result

    def _abandon_capture(self, graph: Any) -> None:
        """Ends what a failed capture may have left open, each step only if still open: the
        stream's capture, the allocator's routing into the graph's pool, the error the
        device reports once."""
        torch = self.torch
        for end in (graph.capture_end, lambda: torch._C._cuda_endAllocateToPool(self.index, graph.pool())):
            try:
                end()
            except Exception:  # already ended, or this torch ended it itself
                pass
        try:
            torch.cuda.synchronize()
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
    graph, _ = device.capture(lambda: static.add_(1))
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

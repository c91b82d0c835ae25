# SPDX-License-Identifier: Apache-2.0
"""The measurement engine: how one contender (candidate, eager or torch.compile reference)
is timed on one device.

Every sample follows the same recipe, whatever the contender:

1. fresh input contents, generated from a seed outside the timed window;
2. the cache flushed (on CUDA: a buffer of at least twice the device's L2, read from the
   device, is zeroed, and persisting-L2 lines are demoted first), then the device synchronized;
3. the timed region: CUDA events around the call(s) on the current stream (host
   ``perf_counter_ns`` on the CPU);
4. the whole device synchronized before the fence that closes the sample: work the call
   left running on other streams is measured by the gap between the end event and that
   fence and charged to the sample ("escape").

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

_MIB = 1 << 20
_SEED_STRIDE = 0x9E3779B97F4A7C15
_SEED_MASK = (1 << 63) - 1


class CaptureFailed(RuntimeError):
    """A contender cannot be captured in a CUDA graph; the session falls back to batching."""


@dataclass
class Sample:
    """One timed sample, per call."""

    time_us: float
    calls: int
    raw_us: float
    escape_us: float = 0.0

    def to_json(self) -> dict:
        return {
            "time_us": self.time_us,
            "calls": self.calls,
            "raw_us": self.raw_us,
            "escape_us": self.escape_us,
        }


def per_call_time(raw_us: float, escape_us: float, calls: int, launch_leak_us: float) -> float:
    """Microseconds per call of a sample: the window less the launch leak (never more than
    half of it), plus escaped work, over the calls."""
    corrected = max(raw_us - launch_leak_us, raw_us / 2)
    return (corrected + escape_us) / max(calls, 1)


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


class CpuDevice:
    """Host timers and a cache flush for the CPU (the same control flow as CUDA, for CI)."""

    kind = "cpu"
    supports_graphs = False

    def __init__(self, torch: Any, flush_bytes: int | None = None):
        self.torch = torch
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
        }

    @property
    def torch_device(self) -> str:
        return "cpu"

    def synchronize(self) -> None:
        pass

    def flush(self) -> None:
        self._flush_buffer.add_(1)  # reads and writes every line

    def time_region(self, body: Callable[[], Any]) -> tuple[float, float, Any]:
        """(elapsed µs, gap after the end µs, body's result)."""
        start = time.perf_counter_ns()
        result = body()
        end = time.perf_counter_ns()
        return (end - start) / 1000.0, 0.0, result

    def calibrate_fence(self, repeats: int = 0) -> dict:
        return {"floor_us": 0.0, "tolerance_us": 0.0, "launch_leak_us": 0.0}

    def clock_mhz(self) -> float | None:
        return None

    def graph(self):
        raise CaptureFailed("CUDA graphs do not exist on the CPU")

    def recover_from_capture(self) -> None:
        pass


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


class CudaDevice:
    """CUDA events, an L2 flush sized from the device, a clock probe, and a fence that
    catches work escaping the current stream."""

    kind = "cuda"
    supports_graphs = True

    #: The clock probe spins for these many SM cycles (torch.cuda._sleep); the difference
    #: of the two, over the difference of their event times, is the SM clock.
    PROBE_SHORT_CYCLES = 20_000
    PROBE_LONG_CYCLES = 100_000

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
        self._events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        self._probe_events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        self.runtime = _CudaRuntime()
        if self.runtime.available:
            self.runtime.disable_persisting_l2()
        else:
            self.warnings.append(f"libcudart not reachable ({self.runtime.error}); persisting L2 lines are not reset")
        self.escape_floor_us = 0.0
        self.escape_tolerance_us = 2.0
        self.launch_leak_us = 0.0

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
        }

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    def flush(self) -> None:
        if self.runtime.available:
            self.runtime.reset_persisting_l2()
        self._flush_buffer.zero_()

    def time_region(self, body: Callable[[], Any]) -> tuple[float, float, Any]:
        start, end, fence = self._events
        start.record()
        result = body()
        end.record()
        # The whole device, not the current stream: work on side streams must finish
        # before the sample is closed.
        self.torch.cuda.synchronize()
        fence.record()
        fence.synchronize()
        elapsed_us = start.elapsed_time(end) * 1000.0
        gap_us = end.elapsed_time(fence) * 1000.0
        return elapsed_us, gap_us, result

    def calibrate_fence(self, repeats: int = 30) -> dict:
        """Two constants of this process's timing, measured with harness code only.

        * The gap between the end event and the fence when nothing escapes (host wake-up
          and enqueue latency): gaps beyond it, plus a tolerance, are escaped work.
        * The launch leak: a sample starts on an idle device (so that no work of the
          contender can run before the start event), and the host's enqueue latency of
          the first launch then falls inside the window. It is the difference between a
          trivial kernel timed from idle and the same kernel queued behind work, and is
          taken off every sample (the reference side applies its own value to all sides).
        """
        gaps, idle, queued = [], [], []
        start, end, _ = self._events
        sleep = self.torch.cuda._sleep
        for _ in range(repeats):
            self.flush()
            self.synchronize()
            gaps.append(self.time_region(lambda: None)[1])
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
        floor = statistics.median(gaps)
        spread = statistics.median(abs(gap - floor) for gap in gaps)
        self.escape_floor_us = floor
        self.escape_tolerance_us = max(2.0, 5.0 * spread)
        self.launch_leak_us = max(0.0, statistics.median(idle) - statistics.median(queued))
        return {
            "floor_us": floor,
            "tolerance_us": self.escape_tolerance_us,
            "launch_leak_us": self.launch_leak_us,
        }

    def clock_mhz(self) -> float | None:
        e0, e1, e2 = self._probe_events
        sleep = self.torch.cuda._sleep
        e0.record()
        sleep(self.PROBE_SHORT_CYCLES)
        e1.record()
        sleep(self.PROBE_LONG_CYCLES)
        e2.record()
        e2.synchronize()
        difference_ms = e1.elapsed_time(e2) - e0.elapsed_time(e1)
        if difference_ms <= 0:
            return None
        return (self.PROBE_LONG_CYCLES - self.PROBE_SHORT_CYCLES) / (difference_ms * 1000.0)

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

    def __call__(self, seed: int) -> list:
        torch = self.device.torch
        torch.manual_seed(seed)
        if self.on_device:
            try:
                with torch.device(self.device.torch_device):
                    inputs = list(self.get_inputs())
            except Exception:  # get_inputs that cannot run under a device context
                self.on_device = False
                torch.manual_seed(seed)
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
    last_outputs: list = field(default_factory=list)
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
        """Median per-call time (µs) over a few per-call samples."""
        saved = (self.regime, self.calls)
        self.regime, self.calls = PER_CALL, 1
        try:
            times = [self.sample(derive_seed(seed, index)).time_us for index in range(samples)]
        finally:
            self.regime, self.calls = saved
        return statistics.median(times)

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

    def sample(self, seed: int) -> Sample:
        """One sample on fresh inputs derived from ``seed``."""
        torch = self.device.torch
        device = self.device
        with torch.no_grad():
            if self.regime == CUDA_GRAPH:
                self._refill(seed)
                body = self._graph.replay
            else:
                sets = [self.make_inputs(derive_seed(seed, index)) for index in range(self.calls)]
                function = self.function
                if self.calls == 1:
                    inputs = sets[0]

                    def body():
                        return [function(*inputs)]

                else:

                    def body():
                        return [function(*inputs) for inputs in sets]

            device.flush()
            device.synchronize()
            elapsed_us, gap_us, result = device.time_region(body)
        escape_us = max(0.0, gap_us - device.escape_floor_us - device.escape_tolerance_us)
        self.last_outputs = self._static_outputs if self.regime == CUDA_GRAPH else result
        return Sample(
            time_us=per_call_time(elapsed_us, escape_us, self.calls, device.launch_leak_us),
            calls=self.calls,
            raw_us=elapsed_us,
            escape_us=escape_us,
        )


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

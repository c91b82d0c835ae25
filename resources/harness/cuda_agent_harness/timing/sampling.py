# SPDX-License-Identifier: Apache-2.0
"""The regimes of a sample (one call, N calls captured in a CUDA graph, N calls back to
back), which one a session uses for all contenders together, and how many calls a sample
holds. See ``contender_timer`` for the recipe every sample follows."""

from __future__ import annotations

import math


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


class CaptureFailed(RuntimeError):
    """A contender cannot be captured in a CUDA graph; the session falls back to batching."""


def per_call_time(
    raw_us: float, escape_us: float, calls: int, launch_leak_us: float, covered: bool | None = None
) -> float:
    """Microseconds per call of a sample: the window, plus escaped work, over the calls.
    A window that may hold the host's launch latency (not ``covered``) is charged less the
    launch leak (never more than half of it)."""
    leak = 0.0 if covered else launch_leak_us
    corrected = max(raw_us - leak, raw_us / 2)
    return (corrected + escape_us) / max(calls, 1)


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

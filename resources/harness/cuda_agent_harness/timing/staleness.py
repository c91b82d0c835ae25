# SPDX-License-Identifier: Apache-2.0
"""Whether a cached baseline still describes this machine: its eager time and its clock
against the live session's."""

from __future__ import annotations

import math
import statistics

from .estimates import median_interval


#: A cached baseline is stale when live eager time drifts from it by more than this. The
#: same kernel timed in two sessions differs by 3 to 8% on real GPUs, and eager anchors the
#: cached compile time to the live session anyway (a uniform drift is carried over), so a
#: tighter bound sent torch.compile back to live timing (seconds) for ordinary noise.
DEFAULT_STALE_TOLERANCE = 0.10
#: ... or when the SM clock differs by more than this: a changed clock changes compute-bound
#: and memory-bound kernels unequally, which the eager anchor cannot carry over.
DEFAULT_STALE_CLOCK_TOLERANCE = 0.05


def stale_reason(live_eager_us: list[float], cached_eager_us: list[float], live_clocks_mhz: list[float],
                 cached_clock_mhz: float | None, tolerance: float = DEFAULT_STALE_TOLERANCE,
                 clock_tolerance: float = DEFAULT_STALE_CLOCK_TOLERANCE) -> str | None:
    """Why a cached measurement no longer describes the live session, or None: eager
    drifted past ``tolerance`` beyond doubt (the interval of the drift, from the intervals
    of both medians, lies wholly outside it; the medians alone decide with too few samples
    for intervals), or the median SM clock moved past ``clock_tolerance``. A noisy session
    whose eager median is off only by its own spread does not make the cache stale."""
    if not live_eager_us or not cached_eager_us:
        return "no eager samples to compare"
    live_median, cached_median = statistics.median(live_eager_us), statistics.median(cached_eager_us)
    drift = live_median / cached_median
    live_interval = median_interval(live_eager_us) or (live_median, live_median)
    cached_interval = median_interval(cached_eager_us) or (cached_median, cached_median)
    lowest, highest = live_interval[0] / cached_interval[1], live_interval[1] / cached_interval[0]
    bound = math.log1p(tolerance)
    if math.log(lowest) > bound or math.log(highest) < -bound:
        return f"eager takes {drift:.3f}x its cached time ({lowest:.3f}x to {highest:.3f}x)"
    if cached_clock_mhz and live_clocks_mhz:
        clock_drift = statistics.median(live_clocks_mhz) / float(cached_clock_mhz)
        if abs(math.log(clock_drift)) > math.log1p(clock_tolerance):
            return f"the SM clock runs at {clock_drift:.3f}x the cached session's"
    return None

# SPDX-License-Identifier: Apache-2.0
"""What the samples say: a confidence interval of the median, the precision of a ratio of
two contenders' times, and whether a clock reading counts as throttled."""

from __future__ import annotations

import math
from typing import Sequence


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

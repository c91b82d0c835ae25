# SPDX-License-Identifier: Apache-2.0
"""Summaries of a session's rounds for its result: how many samples the lead covered, per
contender."""

from __future__ import annotations

import math
import statistics
from typing import Any


def _finite_or_zero(value: Any) -> float:
    """A diagnostic number from the candidate side, or 0 when it sent none or garbage."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def dispatch_cover(rounds: list[dict]) -> dict:
    """Per contender, how many of its samples were covered by their lead (the device's time
    alone in the window), how long the leads were, and the host's time per sample (lead,
    inputs, window and waits, as the contender's own process saw it). ``covered_share`` is
    None where the timer cannot tell (host timers)."""
    summary = {}
    names = sorted({name for each in rounds for name in each["samples"]})
    for name in names:
        samples = [each["samples"][name] for each in rounds if name in each["samples"]]
        known = [sample.get("covered") for sample in samples if sample.get("covered") is not None]
        covered = sum(1 for flag in known if flag)
        leads = [float(sample.get("lead_us") or 0.0) for sample in samples]
        walls = [float(sample["wall_us"]) for sample in samples if sample.get("wall_us")]
        summary[name] = {
            "samples": len(samples),
            "covered": covered,
            "covered_share": covered / len(samples) if known else None,
            "lead_us_median": statistics.median(leads) if leads else None,
            "lead_us_max": max(leads, default=None),
            "wall_us_median": statistics.median(walls) if walls else None,
        }
    return summary

# SPDX-License-Identifier: Apache-2.0
"""The lead: how long the spin kernel ahead of each sample keeps the device busy while the
host enqueues the rest, how it grows when a sample was not covered, and where it stops."""

from __future__ import annotations



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

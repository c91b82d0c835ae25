# SPDX-License-Identifier: Apache-2.0
"""Verification plans: which input set each call of a verification gets, and where its
inputs lie in memory.

The reference process draws a plan for every verification from a seed the candidate never
sees, and hands the candidate one step at a time, when that call is due. A plan has
  - every input set called at least ``min_runs`` times (two calls on the same inputs must
    agree), and a few more calls on sets drawn at random, so that the number of calls
    varies from set to set and from one verification to the next; every call is checked,
    so nothing tells a warm-up call from a checked one;
  - no two consecutive calls on the same input set: an output replayed from the previous
    call, or a result cached under an address the previous call used, belongs to other
    inputs;
  - inputs placed either in fresh memory (a new allocation, the tensor starting a random
    multiple of 256 bytes into it, at an address no earlier call of the verification
    used) or in the very buffers of the previous call or of the one before it (new
    contents at an address already seen). Both parities of the call index get at least one
    reuse of the previous call's buffers, so that a cache keyed on addresses meets new
    contents at a known address whatever the length of its life, and at least one call
    after the first gets fresh memory.
"""

from __future__ import annotations

import random

#: Input positions start this many bytes apart at most in fresh memory (in steps of 256
#: bytes, the alignment that CUDA allocations guarantee and vectorized kernels expect).
PAD_STEP_BYTES = 256
MAX_PAD_STEPS = 16

FRESH, PREVIOUS, EARLIER = "fresh", "previous", "earlier"


def _order(runs: list[int], rng: random.Random) -> list[int]:
    """A random order of the calls (``runs[s]`` calls of set ``s``) in which no set is
    called twice in a row, when there is more than one set. Each position takes a set at
    random, weighted by the calls it has left; a set whose calls would otherwise no longer
    fit between the others' is taken first."""
    left = list(runs)
    order: list[int] = []
    while sum(left):
        total = sum(left)
        candidates = [s for s, count in enumerate(left) if count and (not order or s != order[-1] or len(runs) == 1)]
        if not candidates:  # only the previous set has calls left (one set, or a dead end)
            candidates = [s for s, count in enumerate(left) if count]
        forced = [s for s in candidates if left[s] * 2 > total]
        pick = forced[0] if forced else rng.choices(candidates, weights=[left[s] for s in candidates])[0]
        order.append(pick)
        left[pick] -= 1
    return order


def make_plan(sets: int, min_runs: int, extra_calls: int, inputs: int, rng: random.Random) -> list[dict]:
    """Steps of a verification: {"call", "set", "run", "placement"}, in call order.

    ``extra_calls``: at most this many calls beyond ``min_runs`` per set (at least one when
    it is positive). ``inputs``: the number of inputs of a set (each gets its own offset in
    fresh memory). ``placement`` is {"mode": "fresh", "pads": [steps of PAD_STEP_BYTES per
    input]}, {"mode": "previous"} or {"mode": "earlier"} (the buffers of the call two
    before)."""
    if sets < 1 or min_runs < 1:
        raise ValueError("a plan needs at least one input set and one run per set")
    runs = [min_runs] * sets
    for _ in range(rng.randint(1, extra_calls) if extra_calls > 0 else 0):
        runs[rng.randrange(sets)] += 1
    order = _order(runs, rng)
    modes = _modes(len(order), rng)
    steps = []
    seen = [0] * sets
    for call, (set_index, mode) in enumerate(zip(order, modes)):
        seen[set_index] += 1
        placement = {"mode": mode}
        if mode == FRESH:
            placement["pads"] = [rng.randint(0, MAX_PAD_STEPS) for _ in range(inputs)]
        steps.append({"call": call, "set": set_index, "run": seen[set_index], "placement": placement})
    return steps


def _modes(calls: int, rng: random.Random) -> list[str]:
    """Placement modes of ``calls`` calls: the first in fresh memory, each later one in the
    previous call's buffers (45%), the buffers of the call two before (15%) or fresh memory;
    drawn again until a call of each parity reuses the previous call's buffers and a call
    after the first gets fresh memory (as far as the number of calls allows)."""
    for _ in range(1000):
        modes = [FRESH]
        for call in range(1, calls):
            draw = rng.random()
            modes.append(PREVIOUS if draw < 0.45 else EARLIER if draw < 0.6 and call >= 2 else FRESH)
        odd = calls < 2 or any(modes[call] == PREVIOUS for call in range(1, calls, 2))
        even = calls < 3 or any(modes[call] == PREVIOUS for call in range(2, calls, 2))
        fresh = calls < 4 or FRESH in modes[1:]
        if odd and even and fresh:
            return modes
    return [FRESH] + [PREVIOUS] * (calls - 1)


def constants_step(call: int, inputs: int, rng: random.Random) -> dict:
    """The call after the plan, on the inputs of the first set in fresh memory, that goes to
    Model and ModelNew constructed with other floating-point constructor arguments
    (``verify.reference.ConstantsPass``). It comes after every call of the plan was judged:
    the candidate's process builds the second ModelNew then, in place of the first."""
    return {"call": call, "set": 0, "run": 1, "constants": True,
            "placement": {"mode": FRESH, "pads": [rng.randint(0, MAX_PAD_STEPS) for _ in range(inputs)]}}


def repeat_step(call: int, original: dict, calls_since: int) -> dict:
    """A further call on the inputs of ``original``, in the same buffers: what tells a
    wrong result from one that depends on something besides the inputs. ``calls_since``:
    how many calls came after ``original`` (0 or 1)."""
    return {"call": call, "set": original["set"], "run": original["run"] + 1,
            "placement": {"mode": PREVIOUS if calls_since == 0 else EARLIER}}


def describe_placement(placement: dict) -> str:
    mode = placement.get("mode")
    if mode == PREVIOUS:
        return "in the buffers of the call before"
    if mode == EARLIER:
        return "in the buffers of the call two before"
    return "in fresh memory"

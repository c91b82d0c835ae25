# SPDX-License-Identifier: Apache-2.0
"""How the timing benchmarks share their time budget out, and how they set torch.compile up."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "timing_common"))
import benchlib  # noqa: E402


def test_a_part_gets_the_time_left_over_the_parts_owed_less_its_overhead():
    assert benchlib.share_of_budget(300.0, 32) == pytest.approx(9.375)
    assert benchlib.share_of_budget(300.0, 32, overhead_s=1.0) == pytest.approx(8.375)
    assert benchlib.share_of_budget(-5.0, 3) == 0.0  # overrun: the rest get nothing beyond their minimum
    assert benchlib.share_of_budget(10.0, 0) == pytest.approx(10.0)


def test_parts_that_keep_to_their_shares_end_on_the_budget():
    # 16 tasks x 2 sessions; each session takes its limit plus 1.5 s outside its clock,
    # which the next shares learn after the first session.
    budget, spent, outside_seen = 300.0, 0.0, None
    for left in range(32, 0, -1):
        limit = benchlib.share_of_budget(budget - spent, left, outside_seen if outside_seen is not None else 1.0)
        spent += limit + 1.5
        outside_seen = 1.5
    assert spent == pytest.approx(budget, abs=0.6)


def test_an_early_overrun_shrinks_the_later_shares():
    budget, spent, limits = 100.0, 0.0, []
    for left in range(10, 0, -1):
        limit = benchlib.share_of_budget(budget - spent, left)
        limits.append(limit)
        spent += limit + (20.0 if left == 10 else 0.0)  # the first part overran by 20 s
    assert limits[0] == pytest.approx(10.0)
    assert all(later == pytest.approx(70.0 / 9) for later in limits[1:])  # 100 - 30 s over 9 parts
    assert spent == pytest.approx(budget)


def test_pinned_kernels_turn_inductors_on_device_choices_off_and_back_on():
    torch = pytest.importorskip("torch")
    import torch._inductor.config as inductor_config

    saved = inductor_config.deterministic
    try:
        benchlib.pin_compiled_kernels(torch, True)
        assert inductor_config.deterministic is True
        benchlib.pin_compiled_kernels(torch, False)
        assert inductor_config.deterministic is False
    finally:
        inductor_config.deterministic = saved

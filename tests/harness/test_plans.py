# SPDX-License-Identifier: Apache-2.0
"""Verification plans: how many calls each input set gets, in which order, where the inputs
lie, and that the candidate learns each call only when it is due. End to end, candidates
that count on a predictable verification are rejected, and a correct one passes every plan."""

import random

import pytest
import torch

from cuda_agent_harness.verify import plans
from cuda_agent_harness.verify.candidate import Placer
from cuda_agent_harness.verify.reference import Verification

import verification_support as support


def plan(seed, sets=5, min_runs=2, extra_calls=2, inputs=1):
    return plans.make_plan(sets, min_runs, extra_calls, inputs, random.Random(seed))


@pytest.mark.parametrize("seed", range(200))
def test_every_plan_keeps_its_invariants(seed):
    steps = plan(seed)
    sets = [step["set"] for step in steps]
    counts = [sets.count(s) for s in range(5)]
    assert min(counts) >= 2, "every set is called at least twice"
    assert 11 <= len(steps) <= 12, "one or two calls beyond two per set"
    assert all(a != b for a, b in zip(sets, sets[1:])), "no set twice in a row"
    modes = [step["placement"]["mode"] for step in steps]
    assert modes[0] == plans.FRESH
    assert any(modes[i] == plans.PREVIOUS for i in range(1, len(steps), 2)), "a reuse at an odd call"
    assert any(modes[i] == plans.PREVIOUS for i in range(2, len(steps), 2)), "a reuse at an even call"
    assert plans.FRESH in modes[1:], "fresh memory after the first call"
    assert all(step["call"] == index for index, step in enumerate(steps))
    for step in steps:
        if step["placement"]["mode"] == plans.FRESH:
            assert all(0 <= pad <= plans.MAX_PAD_STEPS for pad in step["placement"]["pads"])
    runs = {}
    for step in steps:
        runs[step["set"]] = runs.get(step["set"], 0) + 1
        assert step["run"] == runs[step["set"]]


def test_plans_differ_between_seeds_in_length_order_and_placement():
    drawn = [plan(seed) for seed in range(40)]
    assert len({len(steps) for steps in drawn}) == 2
    assert len({tuple(step["set"] for step in steps) for steps in drawn}) == 40
    assert len({tuple(step["placement"]["mode"] for step in steps) for steps in drawn}) > 20
    assert plan(3) == plan(3), "a plan seed reproduces its plan"
    per_set = {tuple(sorted(step["set"] for step in steps)) for steps in drawn}
    assert len(per_set) > 5, "which sets get the extra calls varies"


def test_small_plans_do_what_they_can():
    one = plan(1, sets=1, extra_calls=0)
    assert [step["set"] for step in one] == [0, 0]
    assert [step["placement"]["mode"] for step in one] == [plans.FRESH, plans.PREVIOUS]
    with pytest.raises(ValueError):
        plans.make_plan(0, 2, 2, 1, random.Random(0))


def test_the_placer_puts_fresh_inputs_at_new_aligned_addresses_and_reuses_buffers_on_request():
    placer = Placer("cpu")
    pristine = [torch.randn(33, 7), 3, torch.arange(5)]
    seen = []
    first = placer.place(pristine, {"mode": plans.FRESH, "pads": [0, 0, 2]})
    seen.append(first[0].data_ptr())
    assert torch.equal(first[0], pristine[0]) and first[1] == 3 and torch.equal(first[2], pristine[2])
    assert first[0].is_contiguous() and first[0].data_ptr() != pristine[0].data_ptr()
    for pads in ([0, 0, 0], [3, 0, 1], [0, 0, 0]):
        fresh = placer.place(pristine, {"mode": plans.FRESH, "pads": pads})
        assert fresh[0].data_ptr() not in seen, "fresh memory is at an address no earlier call used"
        assert (fresh[0].data_ptr() - fresh[0].untyped_storage().data_ptr()) % plans.PAD_STEP_BYTES == 0
        seen.append(fresh[0].data_ptr())
    other = [torch.randn(33, 7), 4, torch.arange(5) * 2]
    again = placer.place(other, {"mode": plans.PREVIOUS})
    assert again[0].data_ptr() == seen[-1] and torch.equal(again[0], other[0]) and again[1] == 4
    fresh = placer.place(pristine, {"mode": plans.FRESH, "pads": [1, 0, 0]})
    earlier = placer.place(other, {"mode": plans.EARLIER})
    assert earlier[0].data_ptr() == seen[-1] != fresh[0].data_ptr(), "the buffers of the call two before"
    assert torch.equal(earlier[0], other[0])
    changed = placer.place([torch.randn(2, 2)], {"mode": plans.PREVIOUS})
    assert changed[0].shape == (2, 2), "buffers of another layout are not reused"


class RecordingSession:
    """Stands in for the channel: records what the reference sends, and answers each step
    with outputs at once."""

    def __init__(self):
        self.sent = []
        self.received = 0
        self.steps_known_at_receive = []

    def send(self, message):
        self.sent.append(message)

    def receive(self):
        calls = [m for m in self.sent if m["type"] == "call"]
        self.steps_known_at_receive.append(len(calls))
        self.received += 1
        return {"type": "outputs", "call": calls[-1]["call"]}


class AcceptingJudge:
    def __init__(self):
        self.matched = {}
        self.judged = []

    def check(self, message, step):
        self.judged.append(step["call"])
        self.matched.setdefault(step["set"], step["call"])


class Expected:
    mutated = []


def test_the_candidate_learns_each_call_only_when_it_is_due():
    steps = plan(11)
    specs = [(1000 + s, 1.0, None) for s in range(5)]
    session, judge = RecordingSession(), AcceptingJudge()
    Verification(session, judge, steps, specs, [Expected()] * 5, observe_last=True).run()
    calls = [m for m in session.sent if m["type"] == "call"]
    assert [m["call"] for m in calls] == list(range(len(steps)))
    # When the outputs of call k arrive, the candidate has seen calls up to k only.
    assert session.steps_known_at_receive == list(range(1, len(steps) + 1))
    assert session.sent[-1] == {"type": "done"}
    for message, step in zip(calls, steps):
        assert set(message) == {"type", "call", "seed", "scale", "distribution", "placement", "return_inputs", "observe"}
        assert message["seed"] == 1000 + step["set"]
        assert message["placement"] == step["placement"]
    assert [m["observe"] for m in calls] == [False] * (len(steps) - 1) + [True]
    assert judge.judged == list(range(len(steps)))


def test_with_a_call_on_changed_constructor_arguments_that_call_is_the_profiled_one():
    # The profiler leaves threads behind: no call may follow the profiled one, whose checks
    # would take them for the candidate's.
    steps = plan(7)
    steps.append(plans.constants_step(len(steps), 1, random.Random(2)))
    specs = [(1000 + s, 1.0, None) for s in range(5)]
    session, judge = RecordingSession(), AcceptingJudge()
    Verification(session, judge, steps, specs, [Expected()] * 5, observe_last=True).run()
    calls = [m for m in session.sent if m["type"] == "call"]
    assert [m["observe"] for m in calls] == [False] * (len(steps) - 1) + [True]
    assert calls[-1].get("constants") is True
    session, judge = RecordingSession(), AcceptingJudge()
    Verification(session, judge, steps, specs, [Expected()] * 5, observe_last=False).run()
    assert not any(m["observe"] for m in session.sent if m["type"] == "call")


def test_a_correct_candidate_passes_every_plan_and_every_call_is_checked(tmp_path):
    lengths = set()
    for seed in range(4):
        result, report = support.verify(tmp_path / str(seed), plan_seed=seed)
        assert result["verdict"]["correct"], result["verdict"]
        assert report["status"] == "completed"
        assert len(result["checks"]) == result["planned_calls"] == report["observations"]["checks"]
        assert [check["call"] for check in result["checks"]] == list(range(1, result["planned_calls"] + 1))
        lengths.add(result["planned_calls"])
    assert lengths == {13, 14}  # the request's sets and the near repeat of the first, two calls each


def test_the_reference_reports_what_it_held_for_the_pools_memory_admission(tmp_path):
    result, _ = support.verify(tmp_path, sets=2)
    # Model of the ReLU task: no parameters; inputs and output of 8 x 64 floats.
    # On the CPU nothing is held on a device, and no device size is reported.
    assert result["footprint"] == {"parameter_bytes": 0, "input_bytes": 8 * 64 * 4, "output_bytes": 8 * 64 * 4,
                                   "peak_device_bytes": 0, "held_device_bytes": 0, "expected_on_host": False}


EXPLOITS = support.EXTENSION + '''
def pointer_relu(x):
    global calls
    calls += 1
    if calls % 2 == 1:
        cache.clear()
    if x.data_ptr() not in cache:
        cache[x.data_ptr()] = torch.relu(x)
    return cache[x.data_ptr()]


def replay_relu(x):
    global calls, previous
    calls += 1
    if calls % 2 == 0 and previous is not None:
        return previous
    previous = torch.relu(x)
    return previous


def first_address_relu(x):
    global first_address
    if first_address is None:
        first_address = x.data_ptr()
    return torch.relu(x) if x.data_ptr() == first_address else torch.zeros_like(x)


def ten_calls_relu(x):
    global calls
    calls += 1
    return torch.relu(x) if calls <= 10 else torch.zeros_like(x)


def sampled_key_relu(x):
    sample = x.reshape(-1)[::max(1, x.numel() // 64)].clone()
    for key, out in cache.values():
        if torch.equal(key, sample):
            return out
    cache[len(cache)] = (sample, torch.relu(x))
    return cache[len(cache) - 1][1]
'''


@pytest.mark.parametrize("function", ["pointer_relu", "replay_relu", "first_address_relu", "ten_calls_relu"])
def test_candidates_that_count_on_a_predictable_verification_are_rejected(tmp_path, function):
    for seed in range(3):
        result, _ = support.verify(tmp_path / str(seed), model_new=support.with_forward(
            f"        return cuda_extension.{function}(x)\n"), extension=EXPLOITS, plan_seed=seed)
        verdict = result["verdict"]
        assert not verdict["correct"]
        assert verdict["reason"] in ("value_mismatch", "nondeterministic"), verdict
        assert verdict["message"].startswith("On call "), verdict["message"]
        assert "input set" in verdict["message"] and "index" in verdict["message"]


def test_a_cache_keyed_on_a_sample_of_the_elements_meets_a_near_repeat(tmp_path):
    # Every other set is drawn afresh, so a key of 64 elements tells sets apart; the near
    # repeat of the first set differs from it in one element in 4096, which such a key misses.
    task = support.RELU_TASK.replace("torch.randn(8, 64)", "torch.randn(64, 1024)")
    for seed in range(3):
        result, _ = support.verify(tmp_path / str(seed), task=task, model_new=support.with_forward(
            "        return cuda_extension.sampled_key_relu(x)\n"), extension=EXPLOITS, plan_seed=seed,
            extra_allowed=support.ALLOWED + ("equal", "clone"))
        verdict = result["verdict"]
        assert not verdict["correct"] and verdict["reason"] == "value_mismatch", verdict
        # whichever of the two came first is the one the cache serves wrongly
        assert "near repeat" in verdict["message"] or "input set 0" in verdict["message"], verdict["message"]

# SPDX-License-Identifier: Apache-2.0
"""The absolute part of the tolerance follows the reference output's magnitude, and the
messages of a call that differs although the same inputs matched before say so, instead
of "the output was never written"."""

import pytest
import torch

from cuda_agent_harness.checks import compare
from cuda_agent_harness.checks.compare import Failure

import verification_support as support


def test_atol_shrinks_with_small_outputs_and_stays_for_ordinary_ones():
    tiny = torch.full((100,), 2e-4)
    scaled = compare.effective_tolerance(compare.PAPER, tiny)
    assert scaled["atol"] == pytest.approx(1e-2 * 2e-4) and scaled["rtol"] == 1e-2
    assert scaled["magnitude"] == pytest.approx(2e-4) and scaled["atol_base"] == 1e-2
    ordinary = compare.effective_tolerance(compare.PAPER, torch.randn(10000) * 3)
    assert ordinary["atol"] == 1e-2, "outputs of order 1 and larger keep atol as given"
    assert compare.effective_tolerance(compare.STRICT, torch.randn(10000) * 3)["atol"] == 1e-4
    zeros = compare.effective_tolerance(compare.PAPER, torch.zeros(10))
    assert zeros["atol"] == pytest.approx(1e-2 * compare.ATOL_SCALE["floor"]), "the floor keeps all-zero outputs comparable"
    half = torch.full((4,), 0.5)
    assert compare.effective_tolerance(compare.PAPER, half)["atol"] == pytest.approx(5e-3)
    with_nonfinite = torch.tensor([3e-4, float("inf"), float("nan"), -4e-4])
    assert compare.magnitude(with_nonfinite) == pytest.approx((12.5e-8) ** 0.5)
    assert compare.effective_tolerance(compare.PAPER, torch.tensor([1, 2]))["atol"] == 1e-2, "integers: exact anyway"
    unscaled = {"default": {"atol": 1e-2, "rtol": 1e-2}}
    assert compare.effective_tolerance(unscaled, tiny) == {"atol": 1e-2, "rtol": 1e-2}


def test_zeros_no_longer_match_a_tiny_output_and_the_message_shows_the_scaled_atol():
    # Seeded: unseeded, one draw in a few put a softmax element above the unscaled atol.
    expected = torch.softmax(torch.randn(4, 4096, generator=torch.Generator().manual_seed(0)), dim=-1)
    zeros = torch.zeros_like(expected)
    compare.compare_tensor(expected, zeros, compare.tolerance_for(compare.PAPER, expected.dtype), "the output")
    with pytest.raises(Failure) as caught:
        compare.compare_tensor(expected, zeros, compare.effective_tolerance(compare.PAPER, expected), "the output")
    assert caught.value.reason == "value_mismatch"
    assert "the root mean square of the reference output" in caught.value.message
    assert "The output is all zeros." in caught.value.message
    # A correct result (float32 rounding) passes the scaled tolerance.
    compare.compare_tensor(expected, expected.double().float(), compare.effective_tolerance(compare.PAPER, expected),
                           "the output")
    stats = compare.compare_tensor(expected, expected.clone(), compare.effective_tolerance(compare.STRICT, expected), "x")
    assert stats["reference_rms"] == pytest.approx(compare.magnitude(expected))


def poisoned_like(tensor):
    return torch.full((tensor.numel() * tensor.element_size(),), compare.POISON_BYTE, dtype=torch.uint8).view(
        tensor.dtype).reshape(tensor.shape)


def test_poison_after_an_earlier_match_is_a_skipped_write_not_an_output_never_written():
    expected = torch.randn(3, 5)
    tolerance = compare.effective_tolerance(compare.PAPER, expected)
    with pytest.raises(Failure) as first:
        compare.compare_tensor(expected, poisoned_like(expected), tolerance, "the output")
    assert "never written" in first.value.message
    with pytest.raises(Failure) as later:
        compare.compare_tensor(expected, poisoned_like(expected), tolerance, "the output", written_before=True)
    assert "never written" not in later.value.message
    assert "earlier call on the same inputs wrote the right values" in later.value.message
    partly = expected.clone()
    partly.view(-1)[-1:] = poisoned_like(partly.view(-1)[-1:])
    with pytest.raises(Failure) as tail:
        compare.compare_tensor(expected, partly, tolerance, "the output", written_before=True)
    assert "never written" not in tail.value.message and "skipped writing" in tail.value.message
    assert tail.value.details["poison"] is True


NONDETERMINISTIC = support.EXTENSION + '''
def empty_after_five(x):
    global calls
    calls += 1
    return torch.relu(x) if calls <= 5 else torch.empty_like(x)


def empty_every_second(x):
    global calls
    calls += 1
    return torch.relu(x) if calls % 2 == 1 else torch.empty_like(x)
'''


def run(tmp_path, function, seed=3):
    result, _ = support.verify(tmp_path, model_new=support.with_forward(f"        return cuda_extension.{function}(x)\n"),
                               extension=NONDETERMINISTIC, plan_seed=seed)
    return result["verdict"]


def test_a_later_call_that_leaves_the_output_unwritten_is_reported_as_nondeterministic(tmp_path):
    for seed in range(3):
        verdict = run(tmp_path / str(seed), "empty_after_five", seed)
        assert verdict["reason"] in ("nondeterministic", "non_finite", "value_mismatch"), verdict
        if verdict["reason"] == "nondeterministic":
            assert "never written" not in verdict["message"]
            assert "on the same inputs matched the reference, this one does not" in verdict["message"]
            assert verdict["details"]["matched_call"] >= 1
            return
    pytest.fail("no plan put a second call on a set after the fifth call")


def test_a_first_call_that_a_repeat_on_the_same_inputs_gets_right_is_nondeterministic(tmp_path):
    verdict = run(tmp_path, "empty_every_second")
    assert verdict["reason"] == "nondeterministic", verdict
    assert "never written" not in verdict["message"]
    assert "on the same inputs placed in the same buffers, then gave the right output" in verdict["message"]
    # Whether the unwritten elements held the poison pattern depends on what the allocator
    # handed out; the message says so exactly when they did.
    assert ("still held the pattern the harness writes into free memory" in verdict["message"]) == \
        verdict["details"].get("poison", False)
    assert verdict["details"]["first_reason"] in ("non_finite", "value_mismatch")
    assert verdict["details"]["repeat_matched"] > verdict["details"]["call"]


def test_a_deterministic_error_stays_a_value_mismatch_after_its_repeats(tmp_path):
    verdict = run(tmp_path, "zeros_like")
    assert verdict["reason"] == "value_mismatch"
    assert verdict["message"].startswith("On call 1 (input set")
    assert "The output is all zeros." in verdict["message"]

# SPDX-License-Identifier: Apache-2.0
"""The timing engine on the CPU: regime rules, sample-count rule, throttle rule, inputs,
contender timing in each regime, and the comparison of handed-over timed outputs."""

import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "resources", "harness"))

torch = pytest.importorskip("torch")
from cuda_agent_harness import timing, timing_session  # noqa: E402

torch.set_num_threads(1)


def test_any_short_contender_switches_every_contender():
    regime, reason = timing.choose_regime({"eager": 900.0, "compile": 400.0, "candidate": 30.0}, graph_capable=True)
    assert regime == timing.CUDA_GRAPH
    assert "candidate" in reason and "30.0" in reason
    assert timing.choose_regime({"eager": 20.0, "candidate": 900.0}, graph_capable=False)[0] == timing.BATCHED
    assert timing.choose_regime({"eager": 50.0, "candidate": 51.0}, graph_capable=True)[0] == timing.PER_CALL
    assert timing.choose_regime({"eager": 10.0}, graph_capable=True, short_kernel_us=5.0)[0] == timing.PER_CALL
    with pytest.raises(ValueError):
        timing.choose_regime({}, graph_capable=True)


def test_calls_per_sample_fill_the_target_within_memory():
    assert timing.choose_calls_per_sample(10.0, bytes_per_call=1 << 20) == 100  # 1000 µs / 10 µs
    assert timing.choose_calls_per_sample(0.5, bytes_per_call=1 << 20) == timing.DEFAULT_MAX_CALLS_PER_SAMPLE
    assert timing.choose_calls_per_sample(10.0, bytes_per_call=1 << 30) == 2  # two sets fill 2 GiB
    assert timing.choose_calls_per_sample(49.0, bytes_per_call=100) == 21
    assert timing.choose_calls_per_sample(900.0, bytes_per_call=100) == 2  # never fewer than 2


def test_median_interval_narrows_with_more_samples():
    assert timing.median_interval([1.0] * 5) is None
    wide = timing.median_interval([float(i) for i in range(10)])
    narrow = timing.median_interval([float(i % 10) for i in range(1000)])
    assert wide[0] < 4.5 < wide[1]
    assert narrow[0] <= 4.5 <= narrow[1]
    assert (narrow[1] - narrow[0]) < (wide[1] - wide[0])


def test_ratio_precision_is_small_for_consistent_pairs_and_large_for_noisy_ones():
    baseline = [100.0 + (i % 3) for i in range(20)]
    steady = [50.0 + (i % 3) * 0.5 for i in range(20)]
    noisy = [50.0 * (1.5 if i % 2 else 0.7) for i in range(20)]
    assert timing.ratio_precision(baseline, steady) < math.log(1.01)
    assert timing.ratio_precision(baseline, noisy) > math.log(1.05)
    assert timing.ratio_precision(baseline[:4], steady[:4]) is None


def test_throttled_samples_are_those_below_the_tolerance():
    assert timing.throttled(1400.0, 1980.0, 0.25) is True  # 70.7% of the reference
    assert timing.throttled(1500.0, 1980.0, 0.25) is False
    assert timing.throttled(None, 1980.0, 0.25) is False
    assert timing.throttled(1500.0, None, 0.25) is False


def test_seeds_of_input_sets_are_distinct_and_reproducible():
    seeds = {timing.derive_seed(12345, index) for index in range(1000)}
    assert len(seeds) == 1000
    assert timing.derive_seed(7, 3) == timing.derive_seed(7, 3)
    assert all(0 <= seed < 2**63 for seed in seeds)


def _device():
    return timing.CpuDevice(torch, flush_bytes=1 << 20)


def test_inputs_are_fresh_per_seed_and_identical_for_a_seed():
    factory = timing.InputFactory(lambda: [torch.randn(8, 8), 3], _device())
    first, again, other = factory(11), factory(11), factory(12)
    assert torch.equal(first[0], again[0]) and first[1] == 3
    assert not torch.equal(first[0], other[0])


def _contender(name="eager"):
    device = _device()
    weight = torch.randn(32)
    return timing.ContenderTimer(name, lambda x: x * weight, device, timing.InputFactory(lambda: [torch.randn(16, 32)], device))


def test_per_call_samples_keep_the_timed_output():
    contender = _contender()
    contender.warm_up(1, min_calls=2, min_seconds=0)
    sample = contender.sample(5)
    assert sample.calls == 1 and sample.time_us == sample.raw_us > 0
    assert len(contender.last_outputs) == 1
    inputs = contender.make_inputs(timing.derive_seed(5, 0))
    assert torch.equal(contender.last_outputs[0], contender.function(*inputs))


def test_batched_samples_divide_by_the_calls_and_use_distinct_inputs():
    contender = _contender()
    contender.configure(timing.BATCHED, 4, seed=3)
    sample = contender.sample(9)
    assert sample.calls == 4
    assert sample.time_us == pytest.approx(sample.raw_us / 4)
    assert len(contender.last_outputs) == 4
    assert not torch.equal(contender.last_outputs[0], contender.last_outputs[1])
    assert contender.calibrate(2, samples=3) > 0
    assert (contender.regime, contender.calls) == (timing.BATCHED, 4)  # calibration leaves the regime alone


def test_graphs_do_not_exist_on_the_cpu():
    contender = _contender()
    with pytest.raises(timing.CaptureFailed):
        contender.configure(timing.CUDA_GRAPH, 4, seed=3)
    assert contender.regime == timing.PER_CALL


def test_varying_non_tensor_inputs_cannot_be_captured():
    with pytest.raises(timing.CaptureFailed, match="changes between seeds"):
        timing._require_fixed_structure("eager", [torch.zeros(2), 3], [torch.zeros(2), 4], torch)
    with pytest.raises(timing.CaptureFailed, match="shape"):
        timing._require_fixed_structure("eager", [torch.zeros(2)], [torch.zeros(3)], torch)
    timing._require_fixed_structure("eager", [torch.zeros(2), 3], [torch.ones(2), 3], torch)


def test_unknown_devices_and_regimes_are_refused():
    with pytest.raises(ValueError, match="unknown device kind"):
        timing.make_device(torch, "tpu")
    with pytest.raises(ValueError, match="unknown regime"):
        _contender().configure("warp_speed", 2, seed=1)


def test_handed_over_outputs_match_only_when_equal_within_tolerance():
    expected_output = (torch.arange(12, dtype=torch.float32).reshape(3, 4), torch.tensor([1, 2]))
    expected = timing_session.output_payload(expected_output, 5, 1 << 20, torch)
    same = timing_session.output_payload((expected_output[0] + 1e-4, expected_output[1].clone()), 5, 1 << 20, torch)
    assert timing_session.compare_payloads(expected, same, 1e-2, 1e-2, torch) is None

    wrong = expected_output[0].clone()
    wrong[2, 1] = 100.0
    problem = timing_session.compare_payloads(
        expected, timing_session.output_payload((wrong, expected_output[1]), 5, 1 << 20, torch), 1e-2, 1e-2, torch
    )
    assert "output 0 differs at sampled element 9" in problem and "9.0" in problem and "100.0" in problem

    nan = expected_output[0].clone()
    nan[0, 0] = float("nan")
    assert timing_session.compare_payloads(
        expected, timing_session.output_payload((nan, expected_output[1]), 5, 1 << 20, torch), 1e-2, 1e-2, torch
    )
    reshaped = timing_session.output_payload((expected_output[0].reshape(4, 3), expected_output[1]), 5, 1 << 20, torch)
    assert "instead of" in timing_session.compare_payloads(expected, reshaped, 1e-2, 1e-2, torch)
    fewer = timing_session.output_payload(expected_output[0], 5, 1 << 20, torch)
    assert "1 outputs instead of 2" in timing_session.compare_payloads(expected, fewer, 1e-2, 1e-2, torch)
    integers = timing_session.output_payload((expected_output[0], torch.tensor([1, 3])), 5, 1 << 20, torch)
    assert "output 1 differs" in timing_session.compare_payloads(expected, integers, 1e-2, 1e-2, torch)


def test_large_outputs_are_compared_at_the_same_sampled_positions_on_both_sides():
    big = torch.randn(100_000)
    first, complete = timing_session.select_elements(big, 77, 1000, torch)
    again, _ = timing_session.select_elements(big.clone(), 77, 1000, torch)
    other, _ = timing_session.select_elements(big, 78, 1000, torch)
    assert not complete and first.numel() == 1000
    assert torch.equal(first, again) and not torch.equal(first, other)
    whole, complete = timing_session.select_elements(big[:500], 77, 1000, torch)
    assert complete and whole.numel() == 500


def test_payload_files_are_read_without_following_links_or_unpickling_code(tmp_path):
    payload = timing_session.output_payload(torch.ones(4), 1, 100, torch)
    path = tmp_path / "outputs.pt"
    torch.save(payload, path)
    assert torch.equal(timing_session.load_payload(str(path), 1 << 20, torch)["values"][0], torch.ones(4))
    with pytest.raises(ValueError, match="limit"):
        timing_session.load_payload(str(path), 10, torch)
    link = tmp_path / "link.pt"
    link.symlink_to(path)
    with pytest.raises(OSError):
        timing_session.load_payload(str(link), 1 << 20, torch)
    evil = tmp_path / "evil.pt"
    torch.save({"values": [timing.Sample(1.0, 1, 1.0)]}, evil)  # an arbitrary object
    with pytest.raises(Exception):
        timing_session.load_payload(str(evil), 1 << 20, torch)


def test_per_call_time_takes_off_the_launch_leak_and_adds_escaped_work():
    assert timing.per_call_time(100.0, 0.0, 1, 4.0) == pytest.approx(96.0)
    assert timing.per_call_time(1000.0, 20.0, 10, 4.0) == pytest.approx(101.6)
    assert timing.per_call_time(6.0, 0.0, 1, 4.0) == pytest.approx(3.0)  # never below half the window
    assert timing.per_call_time(50.0, 0.0, 0, 0.0) == pytest.approx(50.0)

# SPDX-License-Identifier: Apache-2.0
"""The timing engine on a CUDA GPU: the L2 flush sized from the device, the clock probe,
the fence that charges escaped side-stream work, the launch leak, graph timing against
per-call timing, and whole sessions with re-checked outputs. Skipped without a GPU."""

import os
import statistics
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "resources", "harness"))

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from cuda_agent_harness import timing, timing_session  # noqa: E402

FIXTURES = os.path.join(HERE, "timing_fixtures")
TASK = os.path.join(FIXTURES, "small_task.py")
POLICY = {"extra_allowed_operations": ["mul", "add", "relu", "clamp_min"]}


@pytest.fixture(scope="module")
def device():
    return timing.make_device(torch, "cuda")


def test_the_flush_covers_at_least_twice_the_l2_the_device_reports(device):
    assert device.l2_bytes > 0
    assert device.flush_bytes >= 2 * device.l2_bytes
    assert device.describe()["persisting_l2_reset"], device.runtime.error


def test_the_clock_probe_reads_a_plausible_sm_clock(device):
    clocks = [device.clock_mhz() for _ in range(5)]
    assert all(300 < clock < 4000 for clock in clocks), clocks


def test_fence_floor_and_launch_leak_are_small(device):
    fence = device.calibrate_fence()
    assert 0 <= fence["floor_us"] < 500, fence
    assert 0 <= fence["launch_leak_us"] < 50, fence


def _sleeper(side_stream_joined: bool):
    side = torch.cuda.Stream()

    def run(x):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000)  # about 1 ms of device time
        if side_stream_joined:
            torch.cuda.current_stream().wait_stream(side)
        return x.clone()

    return run


def test_work_left_on_a_side_stream_is_charged_to_the_sample(device):
    device.calibrate_fence()
    factory = timing.InputFactory(lambda: [torch.randn(1024)], device)
    escaping = timing.ContenderTimer("escaping", _sleeper(False), device, factory)
    joined = timing.ContenderTimer("joined", _sleeper(True), device, factory)
    escaped = [escaping.sample(seed) for seed in range(5)]
    honest = [joined.sample(seed) for seed in range(5)]
    assert statistics.median(s.escape_us for s in escaped) > 300
    assert statistics.median(s.escape_us for s in honest) < 50
    # Charged or timed, the same work costs about the same.
    ratio = statistics.median(s.time_us for s in escaped) / statistics.median(s.time_us for s in honest)
    assert 0.8 < ratio < 1.25, ratio


def test_graph_timing_agrees_with_per_call_timing_for_a_long_kernel(device):
    device.calibrate_fence()
    factory = timing.InputFactory(lambda: [torch.randn(64 << 20)], device)
    timer = timing.ContenderTimer("relu", torch.relu, device, factory)
    timer.warm_up(1)
    per_call = statistics.median(timer.sample(seed).time_us for seed in range(15))
    timer.configure(timing.CUDA_GRAPH, 4, seed=3)
    graphed = statistics.median(timer.sample(seed).time_us for seed in range(15))
    assert len(timer.last_outputs) == 4
    assert abs(graphed / per_call - 1) < 0.10, (per_call, graphed)


def _session(candidate, **overrides):
    request = {
        "device": "cuda", "reference_path": TASK, "seed": 77,
        "compile": {"enabled": False},
        "budget": {"time_s": 1.0, "min_rounds": 10, "max_rounds": 40},
        "check": {"probability": 1.0},
        **overrides,
    }
    candidate_request = {"device": "cuda", "reference_path": TASK, "policy": POLICY}
    if candidate == "reference":
        candidate_request["candidate_kind"] = "reference"
    else:
        candidate_request["candidate_directory"] = os.path.join(FIXTURES, candidate)
    # CUDA is initialized in this process already: the candidate side starts afresh.
    return timing_session.run_locally(request, candidate_request, fork=False)


def test_a_gpu_session_switches_short_kernels_to_graphs_and_records_clocks():
    result = _session("reference")
    assert result["ok"], result
    assert result["regime"] == timing.CUDA_GRAPH  # a 64 x 256 ReLU takes a few µs
    assert result["calls_per_sample"] >= 2
    clocks = [each["samples"]["eager"]["clock_mhz"] for each in result["rounds"]]
    assert all(clock and clock > 300 for clock in clocks)
    assert result["reference_clock_mhz"] > 300


def test_a_phase_detector_is_caught_on_the_gpu():
    result = _session("phase_detector", short_kernel_us=0.0)
    assert not result["ok"]
    assert result["rejection"]["reason"] == "timed_output_mismatch", result["rejection"]

# SPDX-License-Identifier: Apache-2.0
"""The timing engine on a CUDA GPU: the L2 flush sized from the device, the clock probe,
the device-wide wait that charges escaped side-stream work, the launch leak, the lead that
keeps the host's dispatch out of the window, graph timing against per-call timing, the
arena shared with another process, and whole sessions under the trusted clock. Skipped
without a GPU."""

import os
import statistics
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "resources", "harness"))

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from cuda_agent_harness.timing import arena, contender_timer, devices, input_sets, sampling  # noqa: E402
from cuda_agent_harness.timing.session import run_locally  # noqa: E402

FIXTURES = os.path.join(HERE, "timing_fixtures")
TASK = os.path.join(FIXTURES, "small_task.py")
POLICY = {"extra_allowed_operations": ["mul", "add", "relu", "clamp_min"]}


@pytest.fixture(scope="module")
def device():
    return devices.make_device(torch, "cuda")


def test_the_flush_covers_at_least_twice_the_l2_the_device_reports(device):
    assert device.l2_bytes > 0
    assert device.flush_bytes >= 2 * device.l2_bytes
    assert device.describe()["persisting_l2_reset"], device.runtime.error


def test_the_clock_probe_reads_a_plausible_sm_clock(device):
    # A reading whose spins overlapped the host's enqueue comes back None (sessions skip it;
    # one in five did on an idle H200), never as a wrong clock.
    clocks = [device.clock_mhz() for _ in range(8)]
    readings = [clock for clock in clocks if clock is not None]
    assert len(readings) >= 6, clocks
    assert all(300 < clock < 4000 for clock in readings), clocks


def test_escape_floor_and_launch_leak_are_small(device):
    constants = device.measure_timing_constants()
    assert 0 <= constants["floor_us"] < 500, constants
    assert 0 <= constants["launch_leak_us"] < 50, constants


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
    device.measure_timing_constants()
    factory = input_sets.InputFactory(lambda: [torch.randn(1024)], device)
    escaping = contender_timer.ContenderTimer("escaping", _sleeper(False), device, factory)
    joined = contender_timer.ContenderTimer("joined", _sleeper(True), device, factory)
    escaped = [escaping.sample(seed) for seed in range(5)]
    honest = [joined.sample(seed) for seed in range(5)]
    assert statistics.median(s.escape_us for s in escaped) > 300
    assert statistics.median(s.escape_us for s in honest) < 50
    # Charged or timed, the same work costs about the same.
    ratio = statistics.median(s.time_us for s in escaped) / statistics.median(s.time_us for s in honest)
    assert 0.8 < ratio < 1.25, ratio


def test_graph_timing_agrees_with_per_call_timing_for_a_long_kernel(device):
    device.measure_timing_constants()
    factory = input_sets.InputFactory(lambda: [torch.randn(64 << 20)], device)
    timer = contender_timer.ContenderTimer("relu", torch.relu, device, factory)
    timer.warm_up(1)
    samples = [timer.sample(seed) for seed in range(15)]
    assert sum(1 for s in samples if s.covered) >= 13, [(s.covered, s.lead_us, s.enqueue_us) for s in samples]
    per_call = statistics.median(s.time_us for s in samples)
    timer.configure(sampling.CUDA_GRAPH, 4, seed=3)
    graphed = statistics.median(timer.sample(seed).time_us for seed in range(15))
    assert len(timer.last_outputs) == 4
    assert abs(graphed / per_call - 1) < 0.05, (per_call, graphed)


def _reads_its_temperature_back(temperature):
    def log_softmax(x):
        out = torch.empty_like(x)
        torch.mul(x, 1.0 / temperature.item(), out=out)  # a host synchronization: no graph holds it
        return out.sub_(out.logsumexp(-1, keepdim=True))

    return log_softmax


def test_a_contender_no_graph_can_hold_is_timed_batched_with_the_process_as_it_was(device):
    # torch.cuda.graph left its capture stream current when ending the invalidated capture
    # raised; a candidate like this one was then timed batched, and one of its outputs held
    # other values than its inputs give.
    factory = input_sets.InputFactory(lambda: [torch.randn(64, 1000)], device)
    function = _reads_its_temperature_back(torch.full((1,), 0.7, device=device.torch_device))
    timer = contender_timer.ContenderTimer("item", function, device, factory)
    current = torch.cuda.current_stream()
    with pytest.raises(sampling.CaptureFailed, match="item"):
        timer.configure(sampling.CUDA_GRAPH, 64, seed=3)
    assert torch.cuda.current_stream() == current
    calls = 227
    timer.configure(sampling.BATCHED, calls, seed=5)
    for seed in (11, 12, 13):
        timer.sample(seed)
        assert len(timer.last_outputs) == calls
        wrong = [call for call in range(calls)
                 if not torch.allclose(timer.last_outputs[call],
                                       function(*factory(input_sets.derive_seed(seed, call))), atol=1e-5)]
        assert not wrong, f"seed {seed}: calls {wrong[:10]} of {calls} are wrong"


def test_the_lead_keeps_the_host_dispatch_out_of_the_window(device):
    device.measure_timing_constants()
    factory = input_sets.InputFactory(lambda: [torch.randn(64, 256)], device)

    def many_small_operators(x):  # 20 launches of a few µs of device time each
        for _ in range(10):
            x = x * 1.0001 + 0.5
        return x

    timer = contender_timer.ContenderTimer("dispatch-bound", many_small_operators, device, factory)
    timer.warm_up(1)
    samples = [timer.sample(seed) for seed in range(20)]
    assert sum(1 for s in samples if s.covered) >= 18, [(s.covered, s.lead_us) for s in samples]
    assert all(s.lead_us > 0 for s in samples)
    per_call = statistics.median(s.time_us for s in samples)
    enqueue = statistics.median(s.enqueue_us for s in samples)
    assert per_call < enqueue / 2, (per_call, enqueue)


def _reads_on_a_private_stream(finished: list):
    private = torch.cuda.Stream()

    def run(x):
        with torch.cuda.stream(private):  # does not wait for the current stream
            y = x * 2
            done = torch.cuda.Event(enable_timing=True)
            done.record()
            finished.append(done)
        torch.cuda.current_stream().wait_stream(private)
        return y

    return run


def test_work_started_on_a_private_stream_ahead_of_the_window_reads_stale_inputs(device):
    device.measure_timing_constants()
    factory = input_sets.InputFactory(lambda: [torch.randn(1 << 20)], device)
    finished: list = []
    timer = contender_timer.ContenderTimer("head-escape", _reads_on_a_private_stream(finished), device, factory)
    timer.warm_up(1)
    early = early_and_right = 0
    for seed in range(20):
        timer.sample(seed)
        expected = factory(input_sets.derive_seed(seed, 0))[0] * 2
        ahead_us = -device._events[0].elapsed_time(finished[-1]) * 1000.0  # > 0: done before the window
        if ahead_us > 1.0:
            early += 1
            early_and_right += torch.equal(timer.last_outputs[0], expected)
    # Work ran ahead of the start event on an H200 in every sample (and in half of them,
    # with right outputs, when the inputs were written before the flush). Written last, the
    # inputs are not there yet when it runs: none of it is right, so the re-check of timed
    # outputs rejects it, whatever it saved on the clock.
    print(f"{early} of 20 samples ran the private stream's work ahead of the window")
    assert early_and_right == 0, (early, early_and_right)


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
        request.setdefault("trusted_clock", {"enforce": False})
    else:
        candidate_request["candidate_directory"] = os.path.join(FIXTURES, candidate)
    # CUDA is initialized in this process already: the candidate side starts afresh.
    return run_locally(request, candidate_request, fork=False)


def test_a_gpu_session_switches_short_kernels_to_graphs_and_records_clocks():
    result = _session("reference")
    assert result["ok"], result
    # A 64 x 256 ReLU takes a few µs of device time (its calibration leaves the host's
    # dispatch out), so every contender replays graphs.
    assert result["regime"] == sampling.CUDA_GRAPH, (result["regime_reason"], result["calibration_us"])
    assert all(entry["covered_share"] > 0.8 for entry in result["dispatch_cover"].values()), result["dispatch_cover"]
    assert result["calls_per_sample"] >= 2
    clocks = [each["samples"]["eager"]["clock_mhz"] for each in result["rounds"]]
    assert all(clock and clock > 300 for clock in clocks)
    assert result["reference_clock_mhz"] > 300


def test_a_phase_detector_is_caught_on_the_gpu():
    result = _session("phase_detector", short_kernel_us=0.0)
    assert not result["ok"]
    assert result["rejection"]["reason"] == "timed_output_mismatch", result["rejection"]


_IMPORTER = """
import sys, torch
sys.path.insert(0, sys.argv[2])
from cuda_agent_harness.timing import arena
torch.empty(1, device="cuda")
shared = arena.receive_arena(torch, "cuda", sys.argv[1], 0, 30.0)
values = shared.view(0, (1024,), torch.float32)
assert values[5].item() == 5.0, values[:8]
shared.view(8192, (1024,), torch.float32).copy_(values * 2)
graph, static = torch.cuda.CUDAGraph(), shared.view(16384, (1024,), torch.float32)
with torch.cuda.graph(graph):
    static.copy_(values + 1)
graph.replay()
torch.cuda.synchronize()
"""


def test_device_memory_of_the_arena_is_shared_with_another_process(tmp_path):
    path = str(tmp_path / "arena.sock")
    offer = arena.ArenaOffer(path)
    owned = arena.Arena.create(torch, "cuda", 1 << 20)
    owned.view(0, (1024,), torch.float32).copy_(torch.arange(1024, dtype=torch.float32, device="cuda"))
    torch.cuda.synchronize()
    child = subprocess.Popen([sys.executable, "-c", _IMPORTER, path, os.path.join(HERE, "..", "..", "resources", "harness")])
    offer.hand_over(owned, 60.0)
    assert child.wait(timeout=120) == 0
    expected = torch.arange(1024, dtype=torch.float32, device="cuda")
    assert torch.equal(owned.view(8192, (1024,), torch.float32), expected * 2), "a write of the other process"
    assert torch.equal(owned.view(16384, (1024,), torch.float32), expected + 1), "a graph replayed over the arena"
    owned.close()


def test_an_honest_gpu_candidate_is_bounded_by_trusted_batches_replayed_as_a_graph():
    result = _session("honest", short_kernel_us=0.0)
    assert result["ok"], result
    clock = result["trusted_clock"]
    assert clock["mode"] == "graph", clock["capture_error"]
    assert clock["batches"] >= 3 and not clock["rejected"], clock
    print(f"trusted clock: reported/bound {clock['ratio']:.3f}, {clock['calls_per_batch']} calls per batch,"
          f" margin {clock['margin']:.3f}")


def test_a_gpu_candidate_whose_process_understates_its_times_is_rejected():
    result = _session("under_reporter", short_kernel_us=0.0)
    assert not result["ok"], (result.get("trusted_clock"), [each["samples"]["candidate"] for each in result["rounds"][:3]])
    assert result["rejection"]["reason"] == "time_below_trusted_bound", result["rejection"]

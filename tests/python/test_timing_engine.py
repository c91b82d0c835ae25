# SPDX-License-Identifier: Apache-2.0
"""The timing engine on the CPU: regime rules, sample-count rule, throttle rule, inputs,
and contender timing in each regime."""

import math
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "resources", "harness"))

torch = pytest.importorskip("torch")
from cuda_agent_harness.timing import contender_timer, devices, estimates, input_sets, lead_policy, sampling  # noqa: E402

torch.set_num_threads(1)


def test_any_short_contender_switches_every_contender():
    regime, reason = sampling.choose_regime({"eager": 900.0, "compile": 400.0, "candidate": 30.0}, graph_capable=True)
    assert regime == sampling.CUDA_GRAPH
    assert "candidate" in reason and "30.0" in reason
    assert sampling.choose_regime({"eager": 20.0, "candidate": 900.0}, graph_capable=False)[0] == sampling.BATCHED
    assert sampling.choose_regime({"eager": 50.0, "candidate": 51.0}, graph_capable=True)[0] == sampling.PER_CALL
    assert sampling.choose_regime({"eager": 10.0}, graph_capable=True, short_kernel_us=5.0)[0] == sampling.PER_CALL
    with pytest.raises(ValueError):
        sampling.choose_regime({}, graph_capable=True)


def test_calls_per_sample_fill_the_target_within_memory():
    assert sampling.choose_calls_per_sample(10.0, bytes_per_call=1 << 20) == 100  # 1000 µs / 10 µs
    assert sampling.choose_calls_per_sample(0.5, bytes_per_call=1 << 20) == sampling.DEFAULT_MAX_CALLS_PER_SAMPLE
    assert sampling.choose_calls_per_sample(10.0, bytes_per_call=1 << 30) == 2  # two sets fill 2 GiB
    assert sampling.choose_calls_per_sample(49.0, bytes_per_call=100) == 21
    assert sampling.choose_calls_per_sample(900.0, bytes_per_call=100) == 2  # never fewer than 2


def test_median_interval_narrows_with_more_samples():
    assert estimates.median_interval([1.0] * 5) is None
    wide = estimates.median_interval([float(i) for i in range(10)])
    narrow = estimates.median_interval([float(i % 10) for i in range(1000)])
    assert wide[0] < 4.5 < wide[1]
    assert narrow[0] <= 4.5 <= narrow[1]
    assert (narrow[1] - narrow[0]) < (wide[1] - wide[0])


def test_ratio_precision_is_small_for_consistent_pairs_and_large_for_noisy_ones():
    baseline = [100.0 + (i % 3) for i in range(20)]
    steady = [50.0 + (i % 3) * 0.5 for i in range(20)]
    noisy = [50.0 * (1.5 if i % 2 else 0.7) for i in range(20)]
    assert estimates.ratio_precision(baseline, steady) < math.log(1.01)
    assert estimates.ratio_precision(baseline, noisy) > math.log(1.05)
    assert estimates.ratio_precision(baseline[:4], steady[:4]) is None


def test_throttled_samples_are_those_below_the_tolerance():
    assert estimates.throttled(1400.0, 1980.0, 0.25) is True  # 70.7% of the reference
    assert estimates.throttled(1500.0, 1980.0, 0.25) is False
    assert estimates.throttled(None, 1980.0, 0.25) is False
    assert estimates.throttled(1500.0, None, 0.25) is False


def test_seeds_of_input_sets_are_distinct_and_reproducible():
    seeds = {input_sets.derive_seed(12345, index) for index in range(1000)}
    assert len(seeds) == 1000
    assert input_sets.derive_seed(7, 3) == input_sets.derive_seed(7, 3)
    assert all(0 <= seed < 2**63 for seed in seeds)


def _device():
    return devices.CpuDevice(torch, flush_bytes=1 << 20)


def test_inputs_are_fresh_per_seed_and_identical_for_a_seed():
    factory = input_sets.InputFactory(lambda: [torch.randn(8, 8), 3], _device())
    first, again, other = factory(11), factory(11), factory(12)
    assert torch.equal(first[0], again[0]) and first[1] == 3
    assert not torch.equal(first[0], other[0])


def test_inputs_are_those_get_inputs_makes_after_torch_manual_seed():
    # The factory seeds the generators directly (torch.manual_seed is slow); the inputs must
    # be the ones every process gets from torch.manual_seed(seed), get_inputs().
    def get_inputs():
        return [torch.randn(4, 5), torch.randint(0, 100, (7,)), torch.rand(3)]

    made = input_sets.InputFactory(get_inputs, _device())(2026)
    torch.manual_seed(2026)
    expected = get_inputs()
    assert all(torch.equal(a, b) for a, b in zip(made, expected))


def _contender(name="eager"):
    device = _device()
    weight = torch.randn(32)
    return contender_timer.ContenderTimer(name, lambda x: x * weight, device, input_sets.InputFactory(lambda: [torch.randn(16, 32)], device))


def test_per_call_samples_keep_the_timed_output():
    contender = _contender()
    contender.warm_up(1, min_calls=2, min_seconds=0)
    sample = contender.sample(5)
    assert sample.calls == 1 and sample.time_us == sample.raw_us > 0
    assert len(contender.last_outputs) == 1
    inputs = contender.make_inputs(input_sets.derive_seed(5, 0))
    assert torch.equal(contender.last_outputs[0], contender.function(*inputs))


def test_batched_samples_divide_by_the_calls_and_use_distinct_inputs():
    contender = _contender()
    contender.configure(sampling.BATCHED, 4, seed=3)
    sample = contender.sample(9)
    assert sample.calls == 4
    assert sample.time_us == pytest.approx(sample.raw_us / 4)
    assert len(contender.last_outputs) == 4
    assert not torch.equal(contender.last_outputs[0], contender.last_outputs[1])
    assert contender.calibrate(2, samples=3) > 0
    assert (contender.regime, contender.calls) == (sampling.BATCHED, 4)  # calibration leaves the regime alone


def test_a_buffer_every_call_returns_is_read_as_the_last_call_wrote_it():
    # A contender that keeps one output buffer: after a batched sample, every call's output
    # is that buffer, holding the last call's result; the sample check must compare it with
    # the last call's inputs, not with the inputs of the call it drew.
    device = _device()
    weight = torch.randn(32)
    kept = torch.empty(16, 32)

    def into_kept(x):
        return torch.mul(x, weight, out=kept)

    contender = contender_timer.ContenderTimer("kept", into_kept, device,
                                               input_sets.InputFactory(lambda: [torch.randn(16, 32)], device))
    contender.configure(sampling.BATCHED, 3, seed=3)
    contender.sample(9)
    assert contender.written_last_by(0) == [2] and contender.written_last_by(2) == [2]
    last_inputs = contender.make_inputs(input_sets.derive_seed(9, 2))
    assert torch.equal(contender.last_outputs[0], into_kept(*last_inputs).clone())
    fresh = _contender()
    fresh.configure(sampling.BATCHED, 3, seed=3)
    fresh.sample(9)
    assert fresh.written_last_by(0) == [0], "outputs of their own are each their call's"
    with pytest.raises(ValueError):
        fresh.written_last_by(3)


def test_graphs_do_not_exist_on_the_cpu():
    contender = _contender()
    with pytest.raises(sampling.CaptureFailed):
        contender.configure(sampling.CUDA_GRAPH, 4, seed=3)
    assert contender.regime == sampling.PER_CALL


def test_varying_non_tensor_inputs_cannot_be_captured():
    with pytest.raises(sampling.CaptureFailed, match="changes between seeds"):
        input_sets._require_fixed_structure("eager", [torch.zeros(2), 3], [torch.zeros(2), 4], torch)
    with pytest.raises(sampling.CaptureFailed, match="shape"):
        input_sets._require_fixed_structure("eager", [torch.zeros(2)], [torch.zeros(3)], torch)
    input_sets._require_fixed_structure("eager", [torch.zeros(2), 3], [torch.ones(2), 3], torch)


def test_unknown_devices_and_regimes_are_refused():
    with pytest.raises(ValueError, match="unknown device kind"):
        devices.make_device(torch, "tpu")
    with pytest.raises(ValueError, match="unknown regime"):
        _contender().configure("warp_speed", 2, seed=1)


def test_per_call_time_takes_off_the_launch_leak_and_adds_escaped_work():
    assert sampling.per_call_time(100.0, 0.0, 1, 4.0) == pytest.approx(96.0)
    assert sampling.per_call_time(1000.0, 20.0, 10, 4.0) == pytest.approx(101.6)
    assert sampling.per_call_time(6.0, 0.0, 1, 4.0) == pytest.approx(3.0)  # never below half the window
    assert sampling.per_call_time(50.0, 0.0, 0, 0.0) == pytest.approx(50.0)


def test_covered_samples_keep_their_whole_window():
    assert sampling.per_call_time(100.0, 0.0, 1, 4.0, covered=True) == pytest.approx(100.0)
    assert sampling.per_call_time(100.0, 0.0, 1, 4.0, covered=False) == pytest.approx(96.0)
    assert sampling.per_call_time(100.0, 0.0, 1, 4.0, covered=None) == pytest.approx(96.0)  # cannot tell: as before


def test_samples_report_coverage_and_lead_beside_the_old_fields():
    sample = contender_timer.Sample(time_us=10.0, calls=2, raw_us=20.0, escape_us=1.0, covered=True, lead_us=80.0,
                           enqueue_us=40.0, gap_us=13.0, wall_us=900.0)
    assert sample.to_json() == {"time_us": 10.0, "calls": 2, "raw_us": 20.0, "escape_us": 1.0,
                                "covered": True, "lead_us": 80.0, "enqueue_us": 40.0, "gap_us": 13.0,
                                "wall_us": 900.0}
    assert contender_timer.Sample(1.0, 1, 1.0).to_json()["covered"] is None


def test_the_first_lead_covers_the_enqueue_with_a_margin():
    assert lead_policy.initial_lead_us(100.0) == pytest.approx(1.5 * 100.0 + 20.0)
    assert lead_policy.initial_lead_us(0.0) == pytest.approx(20.0)
    assert lead_policy.initial_lead_us(1e5, cap_us=lead_policy.MAX_LEAD_US) == lead_policy.MAX_LEAD_US
    # A sample that takes 15 ms to enqueue (a graph's input sets refilled) may lead 60 ms.
    assert lead_policy.lead_cap_us(15_000.0) == pytest.approx(60_000.0)
    assert lead_policy.initial_lead_us(15_000.0) == pytest.approx(1.5 * 15_000.0 + 20.0)


def test_an_uncovered_sample_doubles_the_lead_up_to_the_cap_then_gives_it_up():
    assert lead_policy.next_lead_us(100.0, covered=True) == 100.0
    assert lead_policy.next_lead_us(100.0, covered=None) == 100.0
    assert lead_policy.next_lead_us(100.0, covered=False) == 200.0
    assert lead_policy.next_lead_us(15_000.0, covered=False) == lead_policy.MAX_LEAD_US
    # At the cap, one uncovered sample (an enqueue that ran long) keeps the lead; three in a
    # row give it up: no lead covers this contender.
    assert lead_policy.next_lead_us(lead_policy.MAX_LEAD_US, covered=False, uncovered_at_cap=1) == lead_policy.MAX_LEAD_US
    assert lead_policy.next_lead_us(lead_policy.MAX_LEAD_US, covered=False, uncovered_at_cap=3) == 0.0
    assert lead_policy.next_lead_us(lead_policy.MAX_LEAD_US, covered=False) == 0.0
    assert lead_policy.next_lead_us(0.0, covered=False) == 0.0  # given up stays given up
    lead, doublings = 30.0, 0
    while 0 < lead < lead_policy.MAX_LEAD_US:
        lead, doublings = lead_policy.next_lead_us(lead, covered=False), doublings + 1
    assert lead == lead_policy.MAX_LEAD_US and doublings == 10


def test_cpu_samples_have_no_lead_and_cannot_tell_coverage():
    contender = _contender()
    sample = contender.sample(3)
    assert sample.covered is None and sample.lead_us == 0.0
    assert contender.lead_us is None
    assert sample.time_us == sample.raw_us  # the CPU's launch leak is 0


_HEAP_PROBE = """
import ctypes, sys
sys.path.insert(0, sys.argv[1])
import torch
from cuda_agent_harness.timing import contender_timer, devices, estimates, input_sets, lead_policy, sampling

class MallocInfo(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallocInfo
if sys.argv[2] == "cpu-device":
    devices.CpuDevice(torch, flush_bytes=16 << 20)
output = torch.ones(6 << 20)  # 24 MiB, as a timed call's output
mapped_blocks = libc.mallinfo2().hblks
heap_with_output = libc.mallinfo2().arena
del output
print(mapped_blocks, heap_with_output, libc.mallinfo2().arena)
"""


def _probe_the_heap(setup):
    import subprocess

    harness = os.path.join(os.path.dirname(__file__), "..", "..", "resources", "harness")
    run = subprocess.run([sys.executable, "-c", _HEAP_PROBE, harness, setup],
                         capture_output=True, text=True, timeout=120, check=True)
    return [int(field) for field in run.stdout.split()]


def test_the_cpu_device_serves_large_outputs_from_a_heap_it_never_trims():
    # Glibc's default maps a fresh block for a 24 MiB output and unmaps it on free (its own
    # threshold rises only to the largest block freed so far, here the 16 MiB flush), or
    # trims the heap's top, so the next output faults its pages in again: a cost that
    # depends on what the process allocated before, not on the kernel timed.
    default_blocks, _, _ = _probe_the_heap("default")
    blocks, heap_with_output, heap_after_free = _probe_the_heap("cpu-device")
    assert blocks < default_blocks  # the output came from the heap, not from its own mapping
    assert heap_after_free == heap_with_output >= 24 << 20  # and its pages stay there


class ScriptedDevice(devices.CpuDevice):
    """A device that leads like CUDA: it records the order of the steps of each sample, and
    its regions are covered or not, and take as long to enqueue, as the script says."""

    leads = True

    def __init__(self, covered=(), enqueue_us=(), launch_leak_us=5.0):
        super().__init__(torch, flush_bytes=1 << 20)
        self.launch_leak_us = launch_leak_us
        self.steps: list = []
        self.covered = list(covered)
        self.enqueue_us = list(enqueue_us)

    def synchronize(self):
        self.steps.append("synchronize")

    def flush(self):
        self.steps.append("flush")

    def lead(self, lead_us):
        self.steps.append(("lead", lead_us))

    def time_region(self, body):
        self.steps.append("region")
        region = super().time_region(body)
        region.covered = self.covered.pop(0) if self.covered else True
        region.elapsed_us = 50.0
        region.enqueued_ns = time.perf_counter_ns() + int(1000 * (self.enqueue_us.pop(0) if self.enqueue_us else 0))
        return region


def _scripted_contender(device):
    def make_inputs(seed):
        device.steps.append("inputs")
        return [torch.full((4,), float(seed % 97))]

    return contender_timer.ContenderTimer("eager", lambda x: x + 1, device, make_inputs)


def test_the_inputs_are_written_after_the_lead_and_the_flush_right_before_the_window():
    device = ScriptedDevice(enqueue_us=[12000.0, 2000.0])
    contender = _scripted_contender(device)
    contender.sample(1)
    # Two probes from an idle device measure the enqueue; then the sample itself, led.
    probe = ["synchronize", "flush", "inputs", "region"]
    assert device.steps[:8] == probe + probe
    lead = device.steps[9]
    assert device.steps[8:] == ["synchronize", lead, "flush", "inputs", "region"]
    # 1.5 x the shorter probe's enqueue + 20 µs (the probes' own host time comes on top).
    assert lead[0] == "lead" and 1.5 * 2000.0 + 20.0 <= lead[1] < 1.5 * 12000.0 + 20.0


def test_graph_samples_write_their_input_sets_before_the_lead_and_the_flush():
    # A replayed graph cannot start anything ahead of the window, so its N input sets are
    # written first and all flushed out of L2 (written after the flush, the last ones
    # would be warm and the first ones cold), and before the lead, which then has only the
    # flush and the replay to cover.
    device = ScriptedDevice()
    contender = _scripted_contender(device)
    contender.regime, contender.calls, contender.lead_us = sampling.CUDA_GRAPH, 2, 100.0
    contender._graph = type("Graph", (), {"replay": staticmethod(lambda: None)})()
    contender._static_inputs = [[torch.zeros(4)], [torch.zeros(4)]]
    contender.sample(1)
    assert device.steps == ["synchronize", "inputs", "inputs", ("lead", 100.0), "flush", "region"]


def test_a_timer_leads_longer_after_uncovered_samples_and_charges_only_those_the_launch_leak():
    device = ScriptedDevice(covered=[True, True, False, True, False])
    contender = _scripted_contender(device)
    first = contender.sample(1)  # after two covered probes
    assert first.covered is False and first.time_us == pytest.approx(50.0 - 5.0)
    second = contender.sample(2)
    assert second.covered is True and second.lead_us == pytest.approx(2 * first.lead_us)
    assert second.time_us == pytest.approx(50.0)
    third = contender.sample(3)
    assert third.covered is False and contender.lead_us == pytest.approx(4 * first.lead_us)


def test_a_long_enqueue_raises_the_cap_and_only_repeated_misses_at_the_cap_give_the_lead_up():
    # Probes of 15 ms (a graph's input sets refilled): the cap is 60 ms, not 20 ms.
    device = ScriptedDevice(covered=[True, True, False, False, True, False, False, False, False],
                            enqueue_us=[15_000.0, 15_000.0])
    contender = _scripted_contender(device)
    leads = [contender.sample(seed).lead_us for seed in range(8)]
    assert contender.lead_cap_us == pytest.approx(60_000.0, rel=0.01)
    first = leads[0]
    assert leads[1] == pytest.approx(2 * first)  # uncovered: doubled
    assert leads[2] == pytest.approx(contender.lead_cap_us)  # doubled again, to the cap
    # Covered at the cap, then three misses there in a row: kept, then given up.
    assert leads[3:6] == [leads[2]] * 3
    assert leads[6:] == [0.0, 0.0]


def test_a_new_regime_measures_its_own_lead_and_calibration_prefers_covered_samples():
    device = ScriptedDevice()
    contender = _scripted_contender(device)
    contender.sample(1)
    assert contender.lead_us > 0
    contender.configure(sampling.BATCHED, 4, seed=2)
    assert contender.lead_us is None  # the next sample measures it
    contender.sample(3)
    batched_lead = contender.lead_us
    device.covered = [True, True, False, False, True, True, False]  # two probes, then five samples
    # Covered samples take the whole 50 µs window; uncovered ones 45 µs: only the covered count.
    assert contender.calibrate(4, samples=5) == pytest.approx(50.0)
    assert (contender.regime, contender.calls, contender.lead_us) == (sampling.BATCHED, 4, batched_lead)


class RecordingCuda:
    """Stands in for torch.cuda: records what CudaDevice asks of the device, in order."""

    def __init__(self, start_reached: bool):
        self.log: list = []
        self.start_reached = start_reached
        self.events = 0

    def set_device(self, index):
        pass

    def get_device_properties(self, index):
        return type("Properties", (), {"name": "recording", "L2_cache_size": 1 << 20})()

    def Event(self, enable_timing=False):  # noqa: N802 (torch's name)
        cuda, name = self, ["start", "end", "probe0", "probe1", "probe2"][self.events]
        self.events += 1

        class Event:
            def record(self):
                cuda.log.append(("record", name))

            def query(self):
                cuda.log.append(("query", name))
                return cuda.start_reached if name == "start" else True

            def synchronize(self):
                cuda.log.append(("wait", name))

            def elapsed_time(self, other):
                return 0.05

        return Event()

    def synchronize(self):
        self.log.append("synchronize device")

    def _sleep(self, cycles):
        self.log.append(("sleep", cycles))


class RecordingTorch:
    int32 = torch.int32

    def __init__(self, start_reached: bool):
        self.cuda = RecordingCuda(start_reached)

    def empty(self, *shape, dtype=None, device=None):
        return torch.empty(0, dtype=dtype)


class NoRuntime:
    available = False
    error = "not loaded in this test"

    def peak_clock_mhz(self, index):
        return None

    def keep_freed_pool_memory(self, index):
        return False


class RatedRuntime(NoRuntime):
    """A runtime that reports the device's peak SM clock, as an H200's does."""

    def peak_clock_mhz(self, index):
        return 1980.0


@pytest.mark.parametrize("start_reached", [False, True])
def test_the_cuda_window_asks_whether_it_was_covered_before_waiting_for_the_device(monkeypatch, start_reached):
    monkeypatch.setattr(devices, "_CudaRuntime", NoRuntime)
    fake = RecordingTorch(start_reached)
    device = devices.CudaDevice(fake)
    device.lead(100.0)  # no clock measured yet: 2000 MHz, the safe side
    device.lead_clock_mhz = 1500.0
    device.lead(100.0)
    region = device.time_region(lambda: fake.cuda.log.append("body"))
    assert fake.cuda.log == [
        ("sleep", 200_000), ("sleep", 150_000),
        ("record", "start"), "body", ("record", "end"),
        ("query", "start"),  # before anything waits: a wait would let the device catch up
        # Then it watches for the end event and waits for the whole device: escaped work
        # is what that wait finds, with no fence launched after a blocking wake-up.
        ("query", "end"), "synchronize device",
    ]
    assert region.covered is (not start_reached)
    assert region.elapsed_us == pytest.approx(50.0)


def test_escaped_work_is_the_hosts_wait_for_the_device_after_the_end_event(monkeypatch):
    # The gap starts when the host sees the end event and stops when the device-wide wait
    # returns: side-stream work still running makes that wait long, and nothing else the
    # host does around it (polling, wake-up, later launches) is counted.
    monkeypatch.setattr(devices, "_CudaRuntime", NoRuntime)
    fake = RecordingTorch(start_reached=False)
    now = {"ns": 0}
    polls = {"end": 0}

    def query_end():
        polls["end"] += 1
        now["ns"] += 5_000  # each poll costs the host 5 µs, none of which is escaped work
        return polls["end"] >= 3

    def synchronize_device():
        now["ns"] += 700_000  # side-stream work keeps the device busy for 700 µs more

    monkeypatch.setattr(devices, "time", type("Clock", (), {"perf_counter_ns": staticmethod(lambda: now["ns"])}))
    device = devices.CudaDevice(fake)
    start, end = device._events
    end.query = query_end
    fake.cuda.synchronize = synchronize_device
    region = device.time_region(lambda: None)
    assert polls["end"] == 3
    assert region.gap_us == pytest.approx(700.0)


def _probe_reading(monkeypatch, short_ms: float, long_ms: float, runtime=NoRuntime):
    monkeypatch.setattr(devices, "_CudaRuntime", runtime)
    device = devices.CudaDevice(RecordingTorch(start_reached=False))
    first, second, third = device._probe_events
    first.elapsed_time = lambda other: short_ms  # e0 -> e1: the short spin
    second.elapsed_time = lambda other: long_ms  # e1 -> e2: the long spin
    return device


def test_the_clock_probe_turns_two_spins_into_the_sm_clock(monkeypatch):
    # 80,000 cycles more in the long spin, which took 40 µs longer: 2000 MHz.
    device = _probe_reading(monkeypatch, short_ms=0.010, long_ms=0.050)
    assert device.clock_mhz() == pytest.approx(2000.0)
    assert device.lead_clock_mhz == pytest.approx(2000.0)


def test_an_impossible_clock_reading_is_dropped_and_does_not_stretch_leads(monkeypatch):
    # Host latency inside the short spin makes both spins look alike: 80,000 cycles in
    # 0.4 µs would be 200 GHz. It must neither become the lead's clock nor be reported.
    device = _probe_reading(monkeypatch, short_ms=0.0496, long_ms=0.0500)
    device.lead_clock_mhz = 1980.0
    assert device.clock_mhz() is None
    assert device.lead_clock_mhz == 1980.0
    assert device.implausible_clock_readings == 1
    device.lead(100.0)
    assert device.torch.cuda.log[-1] == ("sleep", 198_000)


def test_a_reading_above_the_rated_peak_clock_is_dropped_where_the_runtime_reports_it(monkeypatch):
    # 80,000 cycles in 30 µs: 2667 MHz, possible for some GPU, not for one rated 1980 MHz.
    # Taken as the lead's clock it would make every lead a third longer than asked.
    rated = _probe_reading(monkeypatch, short_ms=0.010, long_ms=0.040, runtime=RatedRuntime)
    assert rated.clock_mhz() is None and rated.implausible_clock_readings == 1
    assert rated.lead_clock_mhz is None
    assert rated.describe()["peak_clock_mhz"] == 1980.0
    # The probe reads a little above the rated peak (up to about 1% on an H200): kept.
    slightly_above = _probe_reading(monkeypatch, short_ms=0.010, long_ms=0.0499, runtime=RatedRuntime)
    assert slightly_above.clock_mhz() == pytest.approx(2005.0, rel=1e-3)
    # Without the rated peak only the bound for any current GPU applies.
    unrated = _probe_reading(monkeypatch, short_ms=0.010, long_ms=0.040)
    assert unrated.clock_mhz() == pytest.approx(2666.7, rel=1e-3)


class RecordingRuntimeLibrary:
    """Stands in for libcudart: records the memory-pool calls, answers like the runtime."""

    def __init__(self, status=0):
        self.calls = []
        self.status = status

    def cudaDeviceGetMemPool(self, pool, device):  # noqa: N802 (the runtime's names)
        pool._obj.value = 0xABC0
        self.calls.append(("get pool", device.value))
        return self.status

    def cudaMemPoolSetAttribute(self, pool, attribute, value):  # noqa: N802
        self.calls.append(("set", pool.value, attribute.value, value._obj.value))
        return 0

    def cudaGetLastError(self):  # noqa: N802
        self.calls.append("clear error")
        return 0


def test_the_device_memory_pool_keeps_what_is_freed_so_a_synchronize_releases_nothing():
    runtime = devices._CudaRuntime.__new__(devices._CudaRuntime)
    runtime.library = RecordingRuntimeLibrary()
    assert runtime.keep_freed_pool_memory(1)
    assert runtime.library.calls == [("get pool", 1), ("set", 0xABC0, 0x4, (1 << 64) - 1)]
    runtime.library = RecordingRuntimeLibrary()
    assert runtime.set_pool_release_threshold(0, 0)  # CUDA's default, for comparisons
    assert runtime.library.calls == [("get pool", 0), ("set", 0xABC0, 0x4, 0)]
    # A device without a pool (or no device): reported, and the runtime's error cleared.
    runtime.library = RecordingRuntimeLibrary(status=1)
    assert not runtime.keep_freed_pool_memory(0)
    assert runtime.library.calls == [("get pool", 0), "clear error"]
    runtime.library = None
    assert not runtime.keep_freed_pool_memory(0)

# SPDX-License-Identifier: Apache-2.0
"""How the timing benchmarks share their time budget out, how they set torch.compile up,
what the A/A benchmark keeps of each verdict, and what the fidelity table shows."""

import importlib.util
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


def _load_script(*parts: str):
    """A benchmark script as a module (they are scripts, not a package)."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", *parts)
    spec = importlib.util.spec_from_file_location("benchmark_" + "_".join(parts).replace(".", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _honesty_script():
    return _load_script("timing_honesty", "run.py")


def _round(index, eager, candidate, clock, throttled=False):
    return {"round": index, "throttled": throttled,
            "samples": {"eager": {"time_us": eager, "clock_mhz": clock},
                        "candidate": {"time_us": candidate, "clock_mhz": clock}}}


class _Judge:
    """Stands in for the C++ judge: one verdict per repetition, from its first round."""

    def __call__(self, session, index):
        rounds = session["repetitions"][index]["rounds"] if index is not None else session["rounds"]
        ratio = rounds[0]["samples"]["eager"]["time_us"] / rounds[0]["samples"]["candidate"]["time_us"]
        return {"versus_eager": {"speedup": ratio, "interval": [ratio * 0.98, ratio * 1.02],
                                 "verdict": "SAME" if abs(ratio - 1) < 0.03 else "SLOWER"}}


def test_each_verdict_keeps_the_rounds_and_clocks_it_came_from():
    honesty = _honesty_script()
    session = {"repetitions": [
        {"rounds": [_round(0, 100.0, 101.0, 1980.0), _round(1, 99.0, 100.0, 1975.0)]},
        {"rounds": [_round(0, 100.0, 110.0, 1700.0, throttled=True)]},
    ]}
    verdicts = honesty.judge_repetitions(_Judge(), session, "eager")
    assert [v["verdict"] for v in verdicts] == ["SAME", "SLOWER"]
    assert verdicts[0]["rounds"] == 2
    assert verdicts[0]["samples"]["candidate"] == [[101.0, 1980.0, False], [100.0, 1975.0, False]]
    assert verdicts[1]["samples"]["eager"] == [[100.0, 1700.0, True]]
    # A session of one comparison keeps its rounds at the top level.
    single = honesty.judge_repetitions(_Judge(), {"rounds": [_round(0, 50.0, 50.0, None)]}, "eager")
    assert single[0]["rounds"] is None and single[0]["samples"]["eager"] == [[50.0, None, False]]


def test_a_comparison_through_the_cache_records_the_anchor_it_used():
    honesty = _honesty_script()
    cached_rounds = [{"eager": t, "compile": t / 25} for t in (8000.0, 8100.0, 8200.0)]  # as the cache keeps them
    session = {"cached_baselines": {"clock_mhz": 1980.0, "measured_at": "2026-11-30T17:00:00Z",
                                    "rounds": cached_rounds}}
    assert honesty.cached_anchor(session) == {
        "clock_mhz": 1980.0, "measured_at": "2026-11-30T17:00:00Z",
        "eager_median_us": 8100.0, "compile_median_us": pytest.approx(324.0),
    }
    assert honesty.cached_anchor({"cached_baselines": None}) is None


def test_a_verdict_through_the_cache_keeps_eager_drift_and_the_interval_before_widening():
    honesty = _honesty_script()

    class CachedJudge:
        def __call__(self, session, index):
            return {"versus_compile": {"speedup": 0.97, "interval": [0.90, 1.02], "verdict": "AMBIGUOUS"},
                    "details": {"compile_timing": {"source": "cache", "eager_drift": 0.95,
                                                   "interval_before_drift": [0.90, 0.969]}}}

    verdict = honesty.judge_repetitions(CachedJudge(), {"rounds": [_round(0, 50.0, 50.0, None)]}, "compile")[0]
    assert verdict["through_cache"] == {"eager_drift": 0.95, "interval_before_drift": [0.90, 0.969]}
    # Eager verdicts never go through the cache.
    assert "through_cache" not in honesty.judge_repetitions(_Judge(), {"rounds": [_round(0, 50.0, 50.0, None)]},
                                                            "eager")[0]


def _summarize_script():
    return _load_script("timing_common", "summarize.py")


def test_the_fidelity_table_tells_the_window_from_the_escape_charge():
    summarize = _summarize_script()
    workload = {"workload": "conv2d", "regime": "per_call", "calls": 1, "profiler_us": 342.36,
                "graph_device_us": 322.32, "ratio": 1.0622, "ok": False, "window_ratio": 1.0113,
                "escape_us": 16.4, "covered_share": 1.0, "lead_us": 871.0}
    older = {key: value for key, value in workload.items() if key not in ("window_ratio", "escape_us")}
    older["workload"] = "from an older run"
    data = {"device": {"kind": "cuda"}, "tolerance": 0.03, "timing_constants": {"launch_leak_us": 8.1, "floor_us": 10.5},
            "workloads": [workload, older], "failures": ["conv2d: ratio 1.0622"]}
    lines, failures = summarize.fidelity(data)
    header = next(line for line in lines if line.startswith("| workload"))
    assert "window ratio" in header and "escape µs" in header
    row = next(line for line in lines if line.startswith("| conv2d"))
    assert "| 1.0622 | FAIL | 1.0113 | 16.40 |" in row
    assert "| - | - |" in next(line for line in lines if line.startswith("| from an older run"))
    assert failures == ["conv2d: ratio 1.0622"]


def test_the_trace_orders_device_activities_and_host_cuda_calls_from_the_first():
    trace = _load_script("timing_fidelity", "trace.py")
    torch = pytest.importorskip("torch")

    class Range:
        def __init__(self, start, end):
            self.start, self.end = start, end

        def elapsed_us(self):
            return self.end - self.start

    def event(name, start, end, on_device):
        kind = torch.autograd.DeviceType.CUDA if on_device else torch.autograd.DeviceType.CPU
        return type("Event", (), {"name": name, "device_type": kind, "time_range": Range(start, end)})()

    profiler = type("Profiler", (), {"events": lambda self: [
        event("cudaDeviceSynchronize", 1400.0, 1430.0, False),
        event("implicit_convolve_sgemm", 1050.0, 1375.0, True),
        event("aten::conv2d", 1000.0, 1040.0, False),  # an operator, not a CUDA call: left out
        event("cudaEventRecord", 1001.0, 1003.0, False),
        event("cudaFreeAsync", 1041.0, 1042.0, False),  # memory handed back through the pool: shown
    ]})()
    rows = trace.timeline(profiler, torch)
    assert [(row["where"], row["name"]) for row in rows] == [
        ("host", "cudaEventRecord"), ("host", "cudaFreeAsync"), ("device", "implicit_convolve_sgemm"),
        ("host", "cudaDeviceSynchronize")]
    assert [row["start_us"] for row in rows] == [0.0, 40.0, 49.0, 399.0]
    assert rows[2]["length_us"] == 325.0


def test_the_fidelity_benchmark_can_put_the_pool_release_threshold_back_to_cudas_default():
    fidelity = _load_script("timing_fidelity", "run.py")

    class Runtime:
        def __init__(self, works):
            self.works, self.calls = works, []

        def set_pool_release_threshold(self, index, threshold):
            self.calls.append((index, threshold))
            return self.works

    def cuda_device(works=True):
        return type("Device", (), {"kind": "cuda", "index": 1, "freed_pool_memory_kept": True,
                                   "runtime": Runtime(works)})()

    device = cuda_device()
    assert fidelity.pool_release(device, default=False) == "kept" and device.runtime.calls == []
    assert fidelity.pool_release(device, default=True).startswith("default")
    assert device.runtime.calls == [(1, 0)] and not device.freed_pool_memory_kept
    with pytest.raises(SystemExit, match="could not be set"):
        fidelity.pool_release(cuda_device(works=False), default=True)
    assert fidelity.pool_release(type("Device", (), {"kind": "cpu"})(), default=True).startswith("none")


def test_the_trace_runs_on_the_cpu_and_names_the_workloads_when_none_matches(capsys):
    trace = _load_script("timing_fidelity", "trace.py")
    assert trace.main(["--device", "cpu", "--samples", "1", "--workloads", "relu"]) == 0
    assert "relu 1M fp32: 1 samples" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="the workloads are: relu 1M fp32, sum 2k x 2k"):
        trace.main(["--device", "cpu", "--workloads", "conv3d"])

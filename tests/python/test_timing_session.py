# SPDX-License-Identifier: Apache-2.0
"""Whole timing sessions on the CPU: the reference side in this process, the candidate
side in a forked child talking over the session socket, as on a GPU machine."""

import json
import os
import statistics
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "resources", "harness"))

torch = pytest.importorskip("torch")
from cuda_agent_harness.timing import sampling  # noqa: E402
from cuda_agent_harness.timing.report import dispatch_cover  # noqa: E402
from cuda_agent_harness.timing.request import comparison_share_s  # noqa: E402
from cuda_agent_harness.timing.session import run_locally  # noqa: E402
from cuda_agent_harness.timing.staleness import stale_reason  # noqa: E402

torch.set_num_threads(1)
FIXTURES = os.path.join(HERE, "timing_fixtures")
# The CPU fixtures compute with these torch operators, which the forward guard lets through
# only because the policy says so (real candidates call their extension instead).
POLICY = {"extra_allowed_operations": ["mul", "add", "relu", "clamp_min"]}
TASK = os.path.join(FIXTURES, "small_task.py")
QUICK = {"time_s": 0.3, "min_rounds": 6, "floor_rounds": 4, "max_rounds": 12, "warmup_s": 0.0,
         "calibration_samples": 3}


def session(candidate, *, compile_enabled=False, cache=None, check=None, fork_reference=False, task=TASK,
            candidate_overrides=None, **overrides):
    request = {
        "device": "cpu",
        "reference_path": task,
        "seed": 1234,
        "compile": {"enabled": compile_enabled, "backend": "eager"},
        "budget": QUICK,
        "check": {"probability": 1.0, **(check or {})},
        "short_kernel_us": 0.0,
        "stale_tolerance": 100.0,  # this machine is too noisy to judge staleness
        "exit_timeout_s": 3.0,
        **overrides,
    }
    if cache:
        request["baseline_cache"] = {"directory": str(cache)}
    candidate_request = {"device": "cpu", "reference_path": task, "policy": POLICY, **(candidate_overrides or {})}
    if candidate in ("reference", "compile"):
        candidate_request["candidate_kind"] = candidate
        candidate_request["compile"] = {"backend": "eager"}
        request.setdefault("trusted_clock", {"enforce": False})  # trusted code: the bound is only reported
    else:
        candidate_request["candidate_directory"] = os.path.join(FIXTURES, candidate)
    return run_locally(request, candidate_request, fork=True, fork_reference=fork_reference)


def assert_rejected(result, reason):
    assert not result["ok"], result
    assert result["rejection"]["reason"] == reason, result["rejection"]
    return result["rejection"]["message"]


def test_an_honest_candidate_is_timed_in_interleaved_rounds_and_rechecked(tmp_path):
    result = session("honest", compile_enabled=True, cache=tmp_path)
    assert result["ok"], result
    assert result["regime"] == sampling.PER_CALL and result["calls_per_sample"] == 1
    rounds = result["rounds"]
    assert QUICK["floor_rounds"] <= len(rounds) <= QUICK["max_rounds"]
    orders = {tuple(each["order"]) for each in rounds}
    assert len(orders) > 1, "the order of contenders is drawn per round"
    for each in rounds:
        assert set(each["samples"]) == {"candidate", "eager", "compile"}
        assert all(sample["time_us"] > 0 for sample in each["samples"].values())
        assert each["checked"], "every round ends with a trusted batch at probability 1"
        assert each["trusted_batch"]["bound_us"] > 0 and each["trusted_batch"]["calls"] >= 1
    assert result["compile_source"] == "live"
    assert result["baseline_cache"]["status"] == "miss"
    assert result["baseline_cache"]["stored"] == [sampling.PER_CALL]
    assert set(result["calibration_us"]) == {"eager", "compile", "candidate"}
    assert result["stop_reason"] in ("target_reached", "time_budget", "max_rounds")
    # Host timers cannot tell whether a sample was covered; the report says so per contender.
    assert all(sample["covered"] is None and sample["lead_us"] == 0.0
               for each in rounds for sample in each["samples"].values())
    # Each side reports the host's time per sample, at least the window it timed.
    assert all(sample["wall_us"] >= sample["raw_us"] > 0 for each in rounds for sample in each["samples"].values())
    clock = result["trusted_clock"]
    assert clock["mode"] == "loop" and clock["batches"] == len(rounds) and not clock["rejected"]
    assert clock["enforced"] and clock["ratio"] >= 1 - clock["margin"]
    cover = result["dispatch_cover"]
    assert set(cover) == {"candidate", "eager", "compile"}
    assert all(entry["samples"] == len(rounds) and entry["covered_share"] is None for entry in cover.values())
    assert result["time_budget"]["limit_s"] is None and result["time_budget"]["comparisons"] == 2  # alone, then with the candidate

    # The next evaluation of the same task takes the baselines from the cache: no compile.
    again = session("honest", compile_enabled=True, cache=tmp_path)
    assert again["ok"], again
    assert again["baseline_cache"]["status"] == "hit"
    assert again["compile_source"] == "cache"
    assert again["compile_seconds"] is None
    assert all(set(each["samples"]) == {"candidate", "eager"} for each in again["rounds"])
    cached = again["cached_baselines"]
    assert cached["regime"] == sampling.PER_CALL and len(cached["rounds"]) >= QUICK["floor_rounds"]


def test_stale_cached_baselines_send_compile_back_to_live_timing(tmp_path):
    first = session("honest", compile_enabled=True, cache=tmp_path)
    # As if measured on another machine: eager took a twentieth of today's time (CPU
    # timings of this small task spread over 2x within one session on a 2-core VM).
    path = first["baseline_cache"]["file"]
    with open(path, encoding="utf-8") as handle:
        entry = json.load(handle)
    for measurement in entry["regimes"].values():
        for each in measurement["rounds"]:
            each["eager"] /= 20
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(entry, handle)
    result = session("honest", compile_enabled=True, cache=tmp_path, stale_tolerance=0.5)
    assert result["ok"], result
    assert result["baseline_cache"]["status"] == "hit"
    assert "stale" in result["baseline_cache"]
    assert result["compile_source"] == "live"
    assert any("compile" in each["samples"] for each in result["rounds"])
    assert result["baseline_cache"]["stored"] == [sampling.PER_CALL]  # refreshed after the candidate left


def test_staleness_tolerates_session_to_session_noise_but_not_a_changed_machine():
    cached = [100.0, 101.0, 99.0]
    # 5.3% slower, as an H200 session measured for an unchanged machine: the anchor carries it.
    assert stale_reason([105.3] * 3, cached, [1980.0], 1980.0) is None
    assert "1.150x" in stale_reason([115.0] * 3, cached, [1980.0], 1980.0)
    assert "0.870x" in stale_reason([87.0] * 3, cached, [], None)
    # The clock is held to its own, tighter bound.
    assert "SM clock" in stale_reason([100.0] * 3, cached, [1850.0], 1980.0)
    assert stale_reason([100.0] * 3, cached, [1900.0], 1980.0) is None
    assert stale_reason([], cached, [], None) == "no eager samples to compare"


def test_a_drift_within_the_sessions_own_spread_is_not_staleness():
    cached = [99.0 + (i % 5) * 0.5 for i in range(30)]  # a quiet session, median 100
    # A noisy one (an H200 under load: quartiles 88 and 134 µs) whose median is 17% higher.
    noisy = [70.0 + 90.0 * i / 38 for i in range(39)]
    assert statistics.median(noisy) / statistics.median(cached) > 1.14
    assert stale_reason(noisy, cached, [], None) is None
    # The same median drift, measured tightly: stale.
    tight = [116.0 + (i % 3) * 0.5 for i in range(39)]
    assert "1.16" in stale_reason(tight, cached, [], None)


def test_a_short_contender_switches_all_contenders_to_batches():
    result = session("honest", short_kernel_us=1e9, compile_enabled=True)
    assert result["ok"], result
    assert result["regime"] == sampling.BATCHED  # no graphs on the CPU
    # The reason names the shortest contender, which any of the three can be on a loaded CPU.
    assert any(name in result["regime_reason"] for name in ("candidate", "eager", "compile")), result["regime_reason"]
    calls = result["calls_per_sample"]
    assert calls >= 2
    for each in result["rounds"]:
        assert {sample["calls"] for sample in each["samples"].values()} == {calls}


def test_both_sides_weigh_the_model_with_the_audit_s_gains():
    # The host hands both sides the gains of the task's audit; the candidate's weights are
    # loaded from its side's reference model, so an honest candidate matches with them.
    gains = {"weight_gains": {"bias": 1000.0}}
    assert session("honest", candidate_overrides=gains, **gains)["ok"]
    # Given to one side only, the timed outputs differ: each side does apply them.
    assert_rejected(session("honest", **gains), "timed_output_mismatch")
    assert_rejected(session("honest", candidate_overrides=gains), "timed_output_mismatch")


def test_a_candidate_that_changes_behaviour_once_timed_is_caught():
    # Its zeros show in the first round checked: in its timed sample, read back first.
    message = assert_rejected(session("phase_detector"), "timed_output_mismatch")
    assert "timed sample are wrong" in message and "expected" in message


def test_a_candidate_that_computes_less_in_its_timed_samples_is_caught_by_their_outputs():
    # It keeps no state and is right on every input of a trusted batch: only its samples are wrong.
    result = session("sample_shortcut")
    message = assert_rejected(result, "timed_output_mismatch")
    assert "outputs of a timed sample are wrong" in message and "expected" in message
    assert result["rejection"]["details"]["call"] == 0


def test_the_samples_of_an_honest_candidate_are_checked_in_every_comparison():
    # With no round drawn for a check, the last round's sample is checked still.
    result = session("honest", check={"probability": 0.0}, repetitions=2)
    assert result["ok"], result
    for repetition in result["repetitions"]:
        assert sum(1 for each in repetition["rounds"] if each.get("sample_checked")) == 1
        assert repetition["rounds"][-1]["sample_checked"]
    assert result["time_budget"]["sample_checks_s"] > 0


def test_zeros_in_place_of_small_outputs_are_caught_by_a_tolerance_scaled_to_them():
    # Outputs around 1e-4: within an absolute 1e-2 of zeros, as verification's scaled one is not.
    message = assert_rejected(session("tiny_phase_detector", task=os.path.join(FIXTURES, "tiny_task.py")),
                              "timed_output_mismatch")
    assert "scaled by the root mean square of the expected output" in message


def test_a_candidate_whose_process_understates_its_times_is_rejected_by_the_trusted_clock():
    result = session("under_reporter")
    message = assert_rejected(result, "time_below_trusted_bound")
    assert "trusted side's own clock" in message
    clock = result["rejection"]["details"]["trusted_clock"]
    assert clock["rejected"] and clock["ratio"] < 1 - clock["margin"]
    # Only a judge that observes lets it through: the bound is reported either way.
    observed = session("under_reporter", trusted_clock={"enforce": False})
    assert observed["ok"] and observed["trusted_clock"]["rejected"] and not observed["trusted_clock"]["enforced"]


def test_a_persistent_output_buffer_is_copied_out_of_the_way_in_trusted_batches():
    result = session("persistent_output")
    assert result["ok"], result
    assert result["trusted_clock"]["batches"] >= 3 and not result["trusted_clock"]["rejected"]


def test_a_candidate_that_leaves_a_thread_running_is_rejected():
    assert_rejected(session("thread_starter"), "work_outlived_call")


def test_a_candidate_that_replaces_the_timer_is_rejected():
    message = assert_rejected(session("timer_patcher"), "global_state_modified")
    assert "perf_counter_ns" in message


def test_a_candidate_that_falls_back_to_torch_once_timed_is_rejected():
    message = assert_rejected(session("torch_fallback"), "forbidden_operation")
    assert "maximum" in message


def test_a_candidate_that_cannot_be_imported_reports_why():
    message = assert_rejected(session("broken_import"), "load_error")
    assert "cuda_extension_that_does_not_exist" in message


def test_a_candidate_that_fails_while_timed_is_reported_as_crashed():
    message = assert_rejected(session("crashes_later"), "crashed")
    assert "illegal memory access" in message


def test_a_candidate_that_hangs_while_timed_times_out():
    assert_rejected(session("hangs", reply_timeout_s=2.0), "timeout")


def test_the_reference_itself_as_candidate_runs_in_the_candidate_process():
    result = session("reference")
    assert result["ok"], result
    assert all(set(each["samples"]) == {"candidate", "eager"} for each in result["rounds"])
    assert result["trusted_clock"]["batches"] >= 3 and not result["trusted_clock"]["enforced"]


def test_repeated_comparisons_run_in_the_same_processes_and_this_one_stays_clean():
    sys.modules.pop("cuda_agent_reference", None)
    result = session("reference", repetitions=3, fork_reference=True)
    assert result["ok"], result
    repetitions = result["repetitions"]
    assert len(repetitions) == 3
    assert repetitions[0]["rounds"] == result["rounds"]
    for each in repetitions:
        assert len(each["rounds"]) >= QUICK["floor_rounds"]
        assert each["rounds"][-1]["checked"]
    # Both sides ran in children: this process could still fork a CUDA-using child.
    assert "cuda_agent_reference" not in sys.modules


def test_a_session_limit_cuts_every_comparison_to_its_share():
    # Nothing is left for the rounds under a limit of 0 s: each comparison stops after the
    # floor of rounds that are ever enough (fewer would give verdicts on noise), and the
    # session says where its time went.
    result = session("reference", repetitions=3, budget={**QUICK, "session_s": 0.0})
    assert result["ok"], result
    for repetition in result["repetitions"]:
        assert len(repetition["rounds"]) == QUICK["floor_rounds"]
        assert repetition["stop_reason"] in ("time_limit", "time_budget")
    spent = result["time_budget"]
    assert spent["limit_s"] == 0.0 and spent["comparisons"] == 3
    assert spent["rounds_s"] > 0 and spent["overhead_s"] > 0
    assert spent["rounds_s"] + spent["overhead_s"] == pytest.approx(result["elapsed_s"])
    # The parts of the rounds' time: every contender's samples, the clock probes (none on
    # the CPU, whose clock is not probed, but the call is timed), the trusted batches.
    assert set(spent["sampling_s"]) == {"candidate", "eager"}
    parts = (sum(spent["sampling_s"].values()) + spent["clock_probes_s"] + spent["trusted_batches_s"]
             + spent["sample_checks_s"])
    assert spent["trusted_batches_s"] > 0  # each comparison has its least number of trusted batches
    assert 0 < parts <= spent["rounds_s"]
    assert set(spent["setup_s"]) == {"timing_constants", "eager_warm_up_and_calibration", "candidate_hello",
                                     "candidate_prepare", "configure", "trusted_clock_setup"}
    assert 0 < sum(spent["setup_s"].values()) <= spent["overhead_s"]


def test_comparisons_share_what_is_left_of_the_session_limit():
    assert comparison_share_s(10.0, 4, most_s=5.0) == pytest.approx(2.5)
    assert comparison_share_s(10.0, 1, most_s=5.0) == pytest.approx(5.0)  # never more than asked
    assert comparison_share_s(-3.0, 2, most_s=5.0) == 0.0  # the overhead ate it all
    assert comparison_share_s(6.0, 0, most_s=5.0) == pytest.approx(5.0)


def test_dispatch_cover_counts_covered_samples_per_contender():
    def entry(covered, lead, wall=None):
        return {"time_us": 1.0, "covered": covered, "lead_us": lead, "wall_us": wall}

    rounds = [
        {"samples": {"eager": entry(True, 100.0, 900.0), "candidate": entry(False, 50.0)}},
        {"samples": {"eager": entry(True, 100.0, 300.0), "candidate": entry(True, 100.0)}},
        {"samples": {"eager": entry(False, 100.0, 500.0), "candidate": {"time_us": 1.0}}},  # an older candidate side
        {"samples": {"eager": entry(True, 200.0, 700.0)}},
    ]
    cover = dispatch_cover(rounds)
    assert cover["eager"] == {"samples": 4, "covered": 3, "covered_share": 0.75,
                              "lead_us_median": 100.0, "lead_us_max": 200.0, "wall_us_median": 600.0}
    assert cover["candidate"]["wall_us_median"] is None  # no side reported it
    assert cover["candidate"]["samples"] == 3 and cover["candidate"]["covered"] == 1
    assert cover["candidate"]["covered_share"] == pytest.approx(1 / 3)
    host = dispatch_cover([{"samples": {"eager": entry(None, 0.0)}}])
    assert host["eager"]["covered_share"] is None

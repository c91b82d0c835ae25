# SPDX-License-Identifier: Apache-2.0
"""A/A honesty of the profiler, and agreement of eager-vs-compile ratios with H100 figures.

For each task, two timing sessions run the real protocol (reference side and candidate
side in separate processes, interleaved rounds, L2 flushes, re-checks):

* reference vs itself: the candidate side times the reference model; its speedup against
  eager must come out SAME or AMBIGUOUS, never FASTER or SLOWER;
* compile vs itself: the candidate side times torch.compile of the reference; its
  speedup against compile (from the baseline cache filled by the first session, through
  the live eager anchor) must never be FASTER or SLOWER either.

torch.compile's kernels are pinned in both kinds of session (``--compile-kernels pinned``,
the default): inductor then skips the on-device benchmarks that choose among kernel
configurations, so the reference process and the candidate process run the same compiled
program. With ``--compile-kernels tuned`` (torch.compile's default), each process makes
some of those choices anew (torch 2.11 does not cache them for reductions whose block it
scales), and on one H200 the two programs of CrossEntropyLoss and KLDivLoss came out 3 to 7%
apart, steadily within each process: a true difference between two programs, which an A/A
comparison is not there to measure. The agreement table's compile times are then those of
pinned kernels too.

Each session makes ``--repetitions`` independent comparisons (fresh seeds and rounds in
the same processes). The first session also times compile live against the reference
model, which gives this GPU's compile/eager ratio for the agreement table (reported, not
asserted: the H100 figures come from another GPU and another software stack).

    python3 benchmarks/timing_honesty/run.py [--budget-s 300] [--repetitions 10] [--max-tasks N] [--out FILE]
    python3 benchmarks/timing_honesty/run.py --prewarm-only [--workers 6]

How the budget is used. --budget-s is the wall time of the whole run, prewarm excluded.
It is shared out as the run goes: each session (two per task) is given a hard limit, the
time left over the sessions still owed (of --max-tasks tasks, default all), less the time
sessions have been seen to cost outside their own clock (starting and ending the
processes). Inside its limit a session subtracts what it has spent so far (CUDA start-up,
building torch.compile, warm-up, calibration, the baselines' own measurement) and gives
each comparison still owed an equal share of the rest, at most --seconds-per-comparison;
a comparison stops when its share ends, once it has the five rounds that are ever enough
(fewer would let noise decide verdicts). Short comparisons have wider intervals (more
AMBIGUOUS), never a different rule. What a session cannot cut is its start-up and
compile time: if those alone exceed its share, the run overruns. So fill the compile
caches first (--prewarm-only compiles every task's reference in parallel processes into
``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR``, so that the sessions load compiled
kernels instead of building them one after the other), and lower --repetitions or
--max-tasks if it still overruns. On one H200, the 16 default tasks of levels 1 to 3 are
meant to fit --budget-s 300 after a prewarm. The run stops early, once --min-tasks tasks
are measured, when less is left than a task has taken so far.

Exit status 1 if any A/A comparison was FASTER or SLOWER, or fewer than --min-tasks tasks
were measured; 2 if a session failed.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "timing_common"))
import benchlib  # noqa: E402

# Cheap to compile first; levels 1, 2 and 3.
DEFAULT_TASKS = [
    "level1/19_ReLU.py",
    "level1/95_CrossEntropyLoss.py",
    "level1/1_Square_matrix_multiplication_.py",
    "level1/40_LayerNorm.py",
    "level1/47_Sum_reduction_over_a_dimension.py",
    "level1/98_KLDivLoss.py",
    "level2/9_Matmul_Subtract_Multiply_ReLU.py",
    "level2/66_Matmul_Dropout_Softmax.py",
    "level2/71_Conv2d_Divide_LeakyReLU.py",
    "level2/6_Conv3d_Softmax_MaxPool_MaxPool.py",
    "level2/79_Conv3d_Multiply_InstanceNorm_Clamp_Multiply_Max.py",
    "level3/1_MLP.py",
    "level3/3_DeepNarrowMLP.py",
    "level3/4_LeNet5.py",
    "level3/8_ResNetBasicBlock.py",
    "level3/47_NetVladNoGhostClusters.py",
]


#: How the progress line shows each comparison's verdict (SAME and SLOWER share a first letter).
VERDICT_MARKS = {"FASTER": "+", "SLOWER": "-", "SAME": "=", "AMBIGUOUS": "?", "NONE": "0"}


def session_requests(task_path: str, device: str, kind: str, arguments, cache_directory: str, seed: int,
                     limit_s: float):
    compile_settings = {"enabled": True, "mode": "default", "backend": arguments.compile_backend}
    reference = {
        "device": device,
        "reference_path": task_path,
        "seed": seed,
        "compile": compile_settings,
        "baseline_cache": {"directory": cache_directory},
        "budget": {
            "time_s": arguments.seconds_per_comparison,
            "session_s": limit_s,
            "min_rounds": 10,
            "floor_rounds": 5,
            "max_rounds": 60,
            "target_relative_error": 0.01,
            "warmup_s": 0.05,
        },
        "check": {"probability": 0.1},
        # Trusted code on both sides: the trusted clock's bound is reported (how far honest
        # contenders fall from it is what its margin must allow), never enforced.
        "trusted_clock": {"enforce": False} if arguments.trusted_clock == "observe" else {"enabled": False},
        "repetitions": arguments.repetitions,
        "deadline_s": 600.0,
    }
    if device == "cpu":
        reference["short_kernel_us"] = 0.0
    candidate = {"device": device, "reference_path": task_path, "candidate_kind": kind, "compile": compile_settings}
    return reference, candidate


def _trusted_clock_summary(clock: dict | None) -> dict | None:
    """What the trusted clock measured of one session (its bound against the reported time)."""
    if not clock:
        return None
    return {key: clock.get(key) for key in ("mode", "calls_per_batch", "batches", "bound_us_fastest",
                                            "reported_median_us", "ratio", "margin", "capture_error", "fastest_batch",
                                            "copy_share", "rejected", "unbounded")}


def round_samples(rounds: list[dict]) -> dict:
    """Per contender, each round's [time µs, SM clock MHz, throttled]: what a verdict came
    from, kept so that a wrong one can be traced to the rounds that made it."""
    kept: dict = {}
    for each in rounds:
        for name, sample in each.get("samples", {}).items():
            kept.setdefault(name, []).append(
                [sample.get("time_us"), sample.get("clock_mhz"), bool(each.get("throttled", False))])
    return kept


def cached_anchor(session: dict) -> dict | None:
    """The cached baselines a compile comparison went through: their clock and medians."""
    cached = session.get("cached_baselines")
    if not cached:
        return None
    medians = {}
    for name in ("eager", "compile"):
        times = [each[name] for each in cached.get("rounds", []) if name in each]  # {"eager": µs, "compile": µs}
        medians[f"{name}_median_us"] = statistics.median(times) if times else None
    return {"clock_mhz": cached.get("clock_mhz"), "measured_at": cached.get("measured_at"), **medians}


def judge_repetitions(judge, session: dict, baseline: str) -> list[dict]:
    verdicts = []
    repetitions = session.get("repetitions", [session])
    for index, repetition in enumerate(repetitions):
        profile = judge(session, index if "repetitions" in session else None)
        estimate = profile.get(f"versus_{baseline}")
        if not estimate:
            verdicts.append({"repetition": index, "verdict": "NONE", "speedup": None})
            continue
        verdicts.append(
            {
                "repetition": index,
                "speedup": estimate["speedup"],
                "low": estimate["interval"][0],
                "high": estimate["interval"][1],
                "verdict": estimate["verdict"],
                "rounds": len(repetition.get("rounds", [])) if "repetitions" in session else None,
                "samples": round_samples(repetition.get("rounds", [])),
            }
        )
        through_cache = profile.get("details", {}).get("compile_timing")
        if baseline == "compile" and through_cache:  # eager's drift and the interval before its widening
            verdicts[-1]["through_cache"] = {key: through_cache.get(key)
                                             for key in ("eager_drift", "interval_before_drift")}
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when present")
    parser.add_argument("--tasks", nargs="*", default=None, help="KernelBench paths (levelN/file.py) or files")
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--seconds-per-comparison", type=float, default=0.5, help="the most per comparison")
    parser.add_argument("--budget-s", type=float, default=300.0, help="wall time of the run; see above")
    parser.add_argument("--max-tasks", type=int, default=None, help="measure at most the first N tasks")
    parser.add_argument("--prewarm-only", action="store_true", help="fill the compile caches, then exit")
    parser.add_argument("--workers", type=int, default=6, help="parallel processes for --prewarm-only")
    parser.add_argument("--also", nargs="*", default=[], help="more task files for --prewarm-only")
    parser.add_argument("--min-tasks", type=int, default=15)
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--compile-kernels", choices=("pinned", "tuned"), default="pinned",
                        help="pinned: the same compiled program in every process (see above)")
    parser.add_argument("--trusted-clock", choices=("observe", "off"), default="observe",
                        help="observe (default): the candidate side's trusted batches run and are reported; off: none "
                             "run, to see what they do to the samples around them")
    parser.add_argument("--judge", default=None)
    parser.add_argument("--out", default=os.path.join(benchlib.ROOT, "benchmarks", "results", "timing_honesty.json"))
    arguments = parser.parse_args()

    device = arguments.device or ("cuda" if benchlib.gpu_present() else "cpu")
    tasks = arguments.tasks or (DEFAULT_TASKS if device == "cuda" else [os.path.join(benchlib.FIXTURES, "small_task.py")])
    if arguments.max_tasks is not None:
        tasks = tasks[:max(1, arguments.max_tasks)]
    task_paths = [relative if os.path.isabs(relative) else benchlib.kernelbench_task(relative) for relative in tasks]
    missing = [path for path in task_paths if not os.path.isfile(path)]
    if missing:
        print("error: task files not found: " + ", ".join(missing), file=sys.stderr)
        return 2
    if arguments.prewarm_only:
        # The --also files are compiled as the library compiles them (their sessions are not A/A).
        pinned = arguments.compile_kernels == "pinned"
        problems = benchlib.prewarm_compile(task_paths + list(arguments.also), device, arguments.compile_backend,
                                            "default", arguments.workers,
                                            [pinned] * len(task_paths) + [False] * len(arguments.also))
        for problem in problems:
            print(f"warning: prewarm: {problem} (its session compiles live)")
        return 0

    import torch

    from cuda_agent_harness.timing.session import run_locally

    # The sessions are forked from this process and compile with its inductor settings.
    benchlib.pin_compiled_kernels(torch, arguments.compile_kernels == "pinned")

    judge = benchlib.Judge(benchlib.find_judge(arguments.judge))
    budget = benchlib.Budget(arguments.budget_s)
    eager_h100, compile_h100 = benchlib.h100_baselines()
    cache_directory = tempfile.mkdtemp(prefix="cuda-agent-aa-cache-")
    rng = random.Random(20261130)
    rows, agreement, durations = [], [], []
    outside = []  # per session: wall time beyond the session's own clock (processes starting and ending)
    session_failures = []
    print(f"A/A honesty on {device}: {len(tasks)} tasks x 2 sessions x {arguments.repetitions} comparisons, "
          f"budget {arguments.budget_s:.0f} s", flush=True)
    try:
        for number, (relative, task_path) in enumerate(zip(tasks, task_paths), 1):
            typical_task_s = statistics.median(durations) if durations else 0.0
            if len(rows) >= arguments.min_tasks and budget.left() < typical_task_s:
                print(f"budget: {len(rows)} tasks done, stopping before {relative} ({budget.elapsed():.0f} s used)")
                break
            started = budget.elapsed()
            row = {"task": relative}
            for position, (kind, baseline) in enumerate((("reference", "eager"), ("compile", "compile"))):
                sessions_left = 2 * (len(tasks) - number + 1) - position
                outside_s = statistics.median(outside) if outside else 1.0
                limit_s = benchlib.share_of_budget(budget.left(), sessions_left, outside_s)
                reference, candidate = session_requests(task_path, device, kind, arguments, cache_directory,
                                                        rng.getrandbits(62), limit_s)
                began = budget.elapsed()
                session = run_locally(reference, candidate, fork=True, fork_reference=True)
                if session.get("elapsed_s") is not None:
                    outside.append(max(0.0, budget.elapsed() - began - float(session["elapsed_s"])))
                spent = session.get("time_budget") or {}
                entry = {"limit_s": limit_s, "elapsed_s": session.get("elapsed_s"),
                         "rounds_s": spent.get("rounds_s"), "comparisons": spent.get("comparisons")}
                if not session.get("ok"):
                    problem = session.get("rejection") or session.get("error")
                    print(f"  {relative} ({kind}): session failed: {problem}", flush=True)
                    row[kind] = {"error": str(problem), **entry}
                    session_failures.append(f"{relative} ({kind}): {problem}")
                    continue
                verdicts = judge_repetitions(judge, session, baseline)
                row[kind] = {
                    "verdicts": verdicts,
                    "regime": session.get("regime"),
                    "compile_source": session.get("compile_source"),
                    "cache": session.get("baseline_cache", {}).get("status"),
                    "calibration_us": session.get("calibration_us"),
                    "dispatch_cover": session.get("dispatch_cover"),
                    "reference_clock_mhz": session.get("reference_clock_mhz"),
                    "cached_anchor": cached_anchor(session),
                    "trusted_clock": _trusted_clock_summary(session.get("trusted_clock")),
                    **entry,
                }
                if kind == "reference":
                    first = judge(session, 0)
                    if first.get("versus_compile"):
                        # candidate = the eager reference: compile time / eager time.
                        measured = 1.0 / first["versus_compile"]["speedup"]
                        level, name = (relative.split("/") + [""])[:2]
                        h100 = None
                        if level in eager_h100 and name in eager_h100[level] and name in compile_h100.get(level, {}):
                            h100 = eager_h100[level][name]["mean"] / compile_h100[level][name]["mean"]
                        agreement.append({"task": relative, "h200_eager_over_compile": measured,
                                          "h100_eager_over_compile": h100,
                                          "eager_us": first["timings"][0]["median_us"] if first["timings"] else None})
            durations.append(budget.elapsed() - started)
            row["seconds_per_comparison"] = _seconds_per_comparison(row)
            rows.append(row)
            summary = "  ".join(
                f"{kind}: " + "".join(VERDICT_MARKS[v["verdict"]] for v in row[kind]["verdicts"])
                if "verdicts" in row.get(kind, {}) else f"{kind}: failed"
                for kind in ("reference", "compile")
            )
            limits = "/".join(f"{row[kind]['limit_s']:.1f}" for kind in ("reference", "compile") if kind in row)
            per_comparison = row["seconds_per_comparison"]
            print(f"  [{number}/{len(tasks)}, {budget.elapsed():.0f} s] {relative}  ({durations[-1]:.0f} s, "
                  f"limits {limits} s, " + (f"{per_comparison:.2f} s per comparison" if per_comparison else "no rounds")
                  + f")  {summary}", flush=True)
    finally:
        judge.close()
        shutil.rmtree(cache_directory, ignore_errors=True)

    comparisons = [v for row in rows for kind in ("reference", "compile")
                   for v in row.get(kind, {}).get("verdicts", [])]
    counts = {name: sum(1 for v in comparisons if v["verdict"] == name)
              for name in ("FASTER", "SLOWER", "SAME", "AMBIGUOUS", "NONE")}
    deviations = [abs(math.log(v["speedup"])) for v in comparisons if v.get("speedup")]
    ratios = [v["speedup"] for v in comparisons if v.get("speedup")]
    per_task = []
    for row in rows:
        entry = {"task": row["task"]}
        for kind in ("reference", "compile"):
            speeds = [v["speedup"] for v in row.get(kind, {}).get("verdicts", []) if v.get("speedup")]
            entry[f"{kind}_median"] = benchlib.quantiles(speeds).get("p50") if speeds else None
            entry[f"{kind}_max_dev"] = max((abs(s - 1) for s in speeds), default=None)
            entry[f"{kind}_same"] = sum(1 for v in row.get(kind, {}).get("verdicts", []) if v["verdict"] == "SAME")
            entry[f"{kind}_regime"] = row.get(kind, {}).get("regime")
        per_task.append(entry)
    print()
    print(benchlib.table(per_task, [
        ("task", "task", "{}"),
        ("reference_regime", "regime", "{}"),
        ("reference_median", "A/A eager: median ratio", "{:.4f}"),
        ("reference_max_dev", "max |r-1|", "{:.4f}"),
        ("reference_same", "SAME", "{}"),
        ("compile_median", "A/A compile: median ratio", "{:.4f}"),
        ("compile_max_dev", "max |r-1|", "{:.4f}"),
        ("compile_same", "SAME", "{}"),
    ]))
    distribution = {key: math.exp(value) - 1 for key, value in benchlib.quantiles(deviations).items()}
    print(f"\n{len(comparisons)} A/A comparisons on {len(rows)} tasks: " +
          ", ".join(f"{name} {count}" for name, count in counts.items()))
    print("|ratio - 1| distribution: " + ", ".join(f"{k} {v * 100:.2f}%" for k, v in distribution.items()))
    clocks = [(row["task"], kind, row[kind]["trusted_clock"]) for row in rows for kind in ("reference", "compile")
              if (row.get(kind) or {}).get("trusted_clock")]
    clock_ratios = [clock["ratio"] for _, _, clock in clocks if clock.get("ratio")]
    if clock_ratios:
        would_reject = [f"{task} ({kind}, {clock['mode']}: {clock['ratio']:.3f}"
                        + (", copied outputs explain it: speed unproven" if clock.get("unbounded") else "") + ")"
                        for task, kind, clock in clocks if clock.get("ratio") and clock["ratio"] < 1 - clock["margin"]]
        print("Trusted clock, reported time over bound for these honest contenders: " +
              ", ".join(f"{k} {v:.3f}" for k, v in benchlib.quantiles(clock_ratios).items()) +
              f"; below the margin in {len(would_reject)} of {len(clock_ratios)}" +
              (": " + "; ".join(would_reject) if would_reject else ""))
        # What a batch costs beyond its calls at the reported speed: the answer's exchange and
        # the read-back, which the margin has to allow for (per batch, not per call).
        beyond = [(clock["fastest_batch"]["elapsed_us"] - clock["calls_per_batch"] * clock["reported_median_us"],
                   clock["fastest_batch"]["read_back_us"]) for _, _, clock in clocks
                  if (clock.get("fastest_batch") or {}).get("elapsed_us") and clock.get("reported_median_us")]
        if beyond:
            print("Trusted clock, a fastest batch's time beyond its calls at the reported speed (µs): " +
                  ", ".join(f"{k} {v:.0f}" for k, v in benchlib.quantiles([b for b, _ in beyond]).items()) +
                  "; of which reading back: " +
                  ", ".join(f"{k} {v:.0f}" for k, v in benchlib.quantiles([r for _, r in beyond]).items()))
    if agreement:
        print("\nAgreement with the H100 baselines (eager time / compile time; reported, not asserted):")
        for entry in agreement:
            entry["direction_agrees"] = (
                None if entry["h100_eager_over_compile"] is None else
                _direction(entry["h200_eager_over_compile"]) == _direction(entry["h100_eager_over_compile"])
            )
        print(benchlib.table(agreement, [
            ("task", "task", "{}"),
            ("eager_us", "eager µs", "{:.1f}"),
            ("h200_eager_over_compile", "here", "{:.3f}"),
            ("h100_eager_over_compile", "H100", "{:.3f}"),
            ("direction_agrees", "same side of ±5%", "{}"),
        ]))
    failures = []
    if counts["FASTER"] or counts["SLOWER"]:
        failures.append(f"{counts['FASTER']} FASTER and {counts['SLOWER']} SLOWER A/A verdicts")
    measured = sum(1 for row in rows if all("verdicts" in row.get(kind, {}) for kind in ("reference", "compile")))
    if measured < arguments.min_tasks:
        failures.append(f"only {measured} tasks measured both ways (at least {arguments.min_tasks} wanted)")
    failures += [f"session failed: {each}" for each in session_failures]
    benchlib.write_results(arguments.out, {
        "benchmark": "timing_honesty",
        "machine": benchlib.machine(torch),
        "device": device,
        "repetitions": arguments.repetitions,
        "budget_s": arguments.budget_s,
        "compile_kernels": arguments.compile_kernels,
        "elapsed_s": budget.elapsed(),
        "counts": counts,
        "ratio_quantiles": benchlib.quantiles(ratios),
        "deviation_quantiles": distribution,
        "tasks": rows,
        "agreement": agreement,
        "failures": failures,
    })
    print(f"elapsed {budget.elapsed():.0f} s")
    for failure in failures:
        print(f"FAIL: {failure}")
    return 2 if session_failures else 1 if failures else 0


def _seconds_per_comparison(row: dict) -> float | None:
    """Mean seconds of interleaved rounds per comparison over a task's sessions."""
    rounds_s = [row[kind]["rounds_s"] for kind in ("reference", "compile") if row.get(kind, {}).get("rounds_s")]
    comparisons = sum(row[kind]["comparisons"] or 0 for kind in ("reference", "compile") if row.get(kind, {}).get("rounds_s"))
    return sum(rounds_s) / comparisons if comparisons else None


def _direction(eager_over_compile: float) -> str:
    if eager_over_compile >= 1 / 0.95:
        return "compile faster"
    if eager_over_compile <= 0.95:
        return "compile slower"
    return "within 5%"


if __name__ == "__main__":
    sys.exit(main())

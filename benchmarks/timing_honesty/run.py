# SPDX-License-Identifier: Apache-2.0
"""A/A honesty of the profiler, and agreement of eager-vs-compile ratios with H100 figures.

For each task, two timing sessions run the real protocol (reference side and candidate
side in separate processes, interleaved rounds, L2 flushes, re-checks):

* reference vs itself: the candidate side times the reference model; its speedup against
  eager must come out SAME or AMBIGUOUS, never FASTER or SLOWER;
* compile vs itself: the candidate side times torch.compile of the reference; its
  speedup against compile (from the baseline cache filled by the first session, through
  the live eager anchor) must never be FASTER or SLOWER either.

Each session makes ``--repetitions`` independent comparisons (fresh seeds and rounds in
the same processes). The first session also times compile live against the reference
model, which gives this GPU's compile/eager ratio for the agreement table (reported, not
asserted: the H100 figures come from another GPU and another software stack).

    python3 benchmarks/timing_honesty/run.py [--budget-s 210] [--repetitions 10] [--out FILE]
    python3 benchmarks/timing_honesty/run.py --prewarm-only [--workers 6]

The budget is shared out as the run goes: each task's comparisons get the time left over
the tasks still owed (at least --min-tasks), less the per-task overhead measured so far
(process start, compile, calibration), between 0.12 s and --seconds-per-comparison. Short
comparisons have wider intervals (more AMBIGUOUS), never a different rule. --prewarm-only
compiles every task's reference in parallel processes into the inductor and Triton caches
(``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``), so that the sessions load compiled
kernels instead of building them one after the other.

Exit status 1 if any A/A comparison was FASTER or SLOWER, or fewer than --min-tasks tasks
were measured; 2 if a session failed.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
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


def session_requests(task_path: str, device: str, kind: str, arguments, cache_directory: str, seed: int):
    compile_settings = {"enabled": True, "mode": "default", "backend": arguments.compile_backend}
    reference = {
        "device": device,
        "reference_path": task_path,
        "seed": seed,
        "compile": compile_settings,
        "baseline_cache": {"directory": cache_directory},
        "budget": {
            "time_s": arguments.seconds_per_comparison_now,
            "min_rounds": 10,
            "floor_rounds": 5,
            "max_rounds": 60,
            "target_relative_error": 0.01,
            "warmup_s": 0.05,
        },
        "check": {"probability": 0.1},
        "repetitions": arguments.repetitions,
        "deadline_s": 600.0,
    }
    if device == "cpu":
        reference["short_kernel_us"] = 0.0
    candidate = {"device": device, "reference_path": task_path, "candidate_kind": kind, "compile": compile_settings}
    return reference, candidate


def judge_repetitions(judge, session: dict, baseline: str) -> list[dict]:
    verdicts = []
    for index in range(len(session.get("repetitions", [session]))):
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
                "rounds": len(session["repetitions"][index]["rounds"]) if "repetitions" in session else None,
            }
        )
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when present")
    parser.add_argument("--tasks", nargs="*", default=None, help="KernelBench paths (levelN/file.py) or files")
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--seconds-per-comparison", type=float, default=0.5, help="the most per comparison")
    parser.add_argument("--budget-s", type=float, default=210.0, help="shared out over the tasks; see above")
    parser.add_argument("--prewarm-only", action="store_true", help="fill the compile caches, then exit")
    parser.add_argument("--workers", type=int, default=6, help="parallel processes for --prewarm-only")
    parser.add_argument("--also", nargs="*", default=[], help="more task files for --prewarm-only")
    parser.add_argument("--min-tasks", type=int, default=15)
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--judge", default=None)
    parser.add_argument("--out", default=os.path.join(benchlib.ROOT, "benchmarks", "results", "timing_honesty.json"))
    arguments = parser.parse_args()

    device = arguments.device or ("cuda" if benchlib.gpu_present() else "cpu")
    tasks = arguments.tasks or (DEFAULT_TASKS if device == "cuda" else [os.path.join(benchlib.FIXTURES, "small_task.py")])
    task_paths = [relative if os.path.isabs(relative) else benchlib.kernelbench_task(relative) for relative in tasks]
    missing = [path for path in task_paths if not os.path.isfile(path)]
    if missing:
        print("error: task files not found: " + ", ".join(missing), file=sys.stderr)
        return 2
    if arguments.prewarm_only:
        problems = benchlib.prewarm_compile(task_paths + list(arguments.also), device, arguments.compile_backend, "default", arguments.workers)
        for problem in problems:
            print(f"warning: prewarm: {problem} (its session compiles live)")
        return 0

    import torch

    from cuda_agent_harness import timing_session

    judge = benchlib.Judge(benchlib.find_judge(arguments.judge))
    budget = benchlib.Budget(arguments.budget_s)
    eager_h100, compile_h100 = benchlib.h100_baselines()
    cache_directory = tempfile.mkdtemp(prefix="cuda-agent-aa-cache-")
    rng = random.Random(20261130)
    rows, agreement, durations, overheads = [], [], [], []
    session_failures = []
    sessions_per_task = 2 * arguments.repetitions
    print(f"A/A honesty on {device}: {len(tasks)} tasks x 2 sessions x {arguments.repetitions} comparisons, "
          f"budget {arguments.budget_s:.0f} s", flush=True)
    try:
        for number, (relative, task_path) in enumerate(zip(tasks, task_paths), 1):
            owed = max(1, arguments.min_tasks - len(rows))
            overhead = sorted(overheads)[len(overheads) // 2] if overheads else 8.0
            if len(rows) >= arguments.min_tasks and budget.left() < overhead + sessions_per_task * 0.12:
                print(f"budget: {len(rows)} tasks done, stopping before {relative} ({budget.elapsed():.0f} s used)")
                break
            share = (budget.left() / owed - overhead) / sessions_per_task
            arguments.seconds_per_comparison_now = min(arguments.seconds_per_comparison, max(0.12, share))
            started = budget.elapsed()
            row = {"task": relative, "seconds_per_comparison": arguments.seconds_per_comparison_now}
            for kind, baseline in (("reference", "eager"), ("compile", "compile")):
                reference, candidate = session_requests(task_path, device, kind, arguments, cache_directory,
                                                        rng.getrandbits(62))
                session = timing_session.run_locally(reference, candidate, fork=True, fork_reference=True)
                if not session.get("ok"):
                    problem = session.get("rejection") or session.get("error")
                    print(f"  {relative} ({kind}): session failed: {problem}", flush=True)
                    row[kind] = {"error": str(problem)}
                    session_failures.append(f"{relative} ({kind}): {problem}")
                    continue
                verdicts = judge_repetitions(judge, session, baseline)
                row[kind] = {
                    "verdicts": verdicts,
                    "regime": session.get("regime"),
                    "compile_source": session.get("compile_source"),
                    "cache": session.get("baseline_cache", {}).get("status"),
                    "calibration_us": session.get("calibration_us"),
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
            overheads.append(max(0.0, durations[-1] - sessions_per_task * arguments.seconds_per_comparison_now))
            rows.append(row)
            summary = "  ".join(
                f"{kind}: " + ",".join(v["verdict"][0] for v in row[kind]["verdicts"])
                if "verdicts" in row.get(kind, {}) else f"{kind}: failed"
                for kind in ("reference", "compile")
            )
            print(f"  [{number}/{len(tasks)}, {budget.elapsed():.0f} s] {relative}  ({durations[-1]:.0f} s, "
                  f"{arguments.seconds_per_comparison_now:.2f} s per comparison)  {summary}", flush=True)
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


def _direction(eager_over_compile: float) -> str:
    if eager_over_compile >= 1 / 0.95:
        return "compile faster"
    if eager_over_compile <= 0.95:
        return "compile slower"
    return "within 5%"


if __name__ == "__main__":
    sys.exit(main())

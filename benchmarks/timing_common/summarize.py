# SPDX-License-Identifier: Apache-2.0
"""Writes RESULTS.md in a results directory from the JSON files of the timing benchmarks
(timing_fidelity.json, timing_honesty.json, edit_to_verdict.json): one table per
benchmark, each target with its figure and PASS / FAIL, and what is missing said so.

    python3 benchmarks/timing_common/summarize.py RESULTS_DIRECTORY [--elapsed-s S]

Exit status 1 if a target was missed, 2 if a result file is missing or unreadable.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys


def _load(directory: str, name: str) -> tuple[dict | None, str | None]:
    path = os.path.join(directory, f"{name}.json")
    if not os.path.isfile(path):
        return None, f"{name}.json is missing: the benchmark did not finish (see its log)"
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle), None
    except (OSError, ValueError) as error:
        return None, f"{name}.json is unreadable: {error}"


def _cell(value, pattern: str = "{}") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return pattern.format(value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def fidelity(data: dict) -> tuple[list[str], list[str]]:
    on_cpu = data.get("device", {}).get("kind") == "cpu"  # host timers: nothing to be faithful to

    def verdict(workload: dict) -> str:
        if on_cpu:
            return "not judged (CPU run)"
        return {True: "PASS", False: "FAIL", None: "not judged (< 30 µs)"}[workload["ok"]]

    rows = [[w["workload"], w["regime"], str(w["calls"]), _cell(w["profiler_us"], "{:.2f}"),
             _cell(w["graph_device_us"], "{:.2f}"), _cell(w["ratio"], "{:.4f}"), verdict(w),
             _cell(w.get("window_ratio"), "{:.4f}"), _cell(w.get("escape_us"), "{:.2f}"),
             _cell(w.get("covered_share"), "{:.2f}"), _cell(w.get("lead_us"), "{:.0f}")] for w in data["workloads"]]
    lines = [f"Target: for kernels of 30 µs and more, the profiler's time lies within "
             f"{data['tolerance'] * 100:.0f}% of CUDA-graph device time. Fence: "
             f"launch leak {data['timing_constants'].get('launch_leak_us', 0):.2f} µs (taken off samples not covered by their "
             f"lead), floor {data['timing_constants'].get('floor_us', 0):.2f} µs. The window ratio leaves out "
             f"the escape charge (µs per call, median), which the profiler's time includes.",
             ""]
    lines += _table(["workload", "regime", "calls/sample", "profiler µs", "graph device µs", "ratio", "verdict",
                     "window ratio", "escape µs", "covered", "lead µs"], rows)
    return lines, list(data.get("failures", []))


def honesty(data: dict) -> tuple[list[str], list[str]]:
    counts = data["counts"]
    total = sum(counts.values())
    budget = f", {data['elapsed_s']:.0f} s for a budget of {data['budget_s']:.0f} s" if data.get("budget_s") else ""
    lines = [f"Target: no A/A comparison FASTER or SLOWER (threshold 5%). {total} comparisons on "
             f"{len(data['tasks'])} tasks ({data['repetitions']} per task and kind{budget}): "
             + ", ".join(f"{name} {count}" for name, count in counts.items()) + ".",
             "",
             "Distribution of abs(ratio − 1) over all comparisons: " + ", ".join(f"{key} {value * 100:.2f}%"
                                                     for key, value in data.get("deviation_quantiles", {}).items()),
             ""]
    rows = []
    for task in data["tasks"]:
        cells = [task["task"], _cell(task.get("seconds_per_comparison"), "{:.2f}")]
        for kind in ("reference", "compile"):
            entry = task.get(kind, {})
            if "verdicts" not in entry:
                cells += [f"failed: {entry.get('error', '?')}"[:80], "-", "-", "-"]
                continue
            speeds = [v["speedup"] for v in entry["verdicts"] if v.get("speedup")]
            tally = {}
            for v in entry["verdicts"]:
                tally[v["verdict"]] = tally.get(v["verdict"], 0) + 1
            cells += [entry.get("regime") or "-",
                      _cell(sorted(speeds)[len(speeds) // 2] if speeds else None, "{:.4f}"),
                      _cell(max((abs(s - 1) for s in speeds), default=None), "{:.4f}"),
                      " ".join(f"{name} {count}" for name, count in sorted(tally.items()))]
        rows.append(cells)
    lines += _table(["task", "s/comparison", "eager A/A regime", "median ratio", "max abs(r−1)", "verdicts",
                     "compile A/A regime", "median ratio", "max abs(r−1)", "verdicts"], rows)
    if data.get("agreement"):
        lines += ["", "Agreement with the H100 baselines (eager time / compile time; reported, not asserted):", ""]
        lines += _table(["task", "eager µs here", "here", "H100", "same side of ±5%"],
                        [[a["task"], _cell(a.get("eager_us"), "{:.1f}"), _cell(a.get("h200_eager_over_compile"), "{:.3f}"),
                          _cell(a.get("h100_eager_over_compile"), "{:.3f}"), _cell(a.get("direction_agrees"))]
                         for a in data["agreement"]])
    return lines, list(data.get("failures", []))


def edit_to_verdict(data: dict) -> tuple[list[str], list[str]]:
    naive = data.get("naive") or {}
    rows = [["workers start", _cell(data.get("workers_start_s"), "{:.2f}")],
            ["first (cold) evaluation", _cell(data.get("cold_s"), "{:.2f}")]]
    rows += [[f"warm edit {index}", _cell(each["total_s"], "{:.2f}")] for index, each in enumerate(data["warm"], 1)]
    rows += [["**warm median** (target ≤ 4 s)", _cell(data.get("warm_median_s"), "**{:.2f}**")],
             ["naive: rebuild / verify / profile", " / ".join(_cell(naive.get(key), "{:.2f}")
                                                           for key in ("rebuild_s", "verify_s", "profile_s"))],
             ["naive total", _cell(naive.get("total_s"), "{:.2f}")],
             ["**speedup** (target ≥ 10×)", _cell(data.get("speedup") or None, "**{:.1f}×**")]]
    return _table(["edit-to-verdict", "seconds"], rows), list(data.get("failures", []))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--elapsed-s", type=float, default=None)
    parser.add_argument("--status", action="append", default=[], help="NAME=EXIT_STATUS of each benchmark")
    arguments = parser.parse_args()
    statuses = dict(item.split("=", 1) for item in arguments.status)

    out = ["# Profiler benchmarks", ""]
    machine = None
    all_failures = []
    missing = False
    sections = (("timing_fidelity", "Fidelity: profiler time against CUDA-graph device time", fidelity),
                ("timing_honesty", "A/A honesty on KernelBench tasks, and agreement with H100 baselines", honesty),
                ("edit_to_verdict", "Edit-to-verdict latency against the naive flow", edit_to_verdict))
    summary = []
    body = []
    for name, title, render in sections:
        data, problem = _load(arguments.directory, name)
        body += [f"## {title}", ""]
        if data is None:
            body += [f"**MISSING**: {problem}", ""]
            failures = [problem]
            missing = True
        else:
            machine = machine or data.get("machine")
            try:
                lines, failures = render(data)
            except (KeyError, TypeError, ValueError) as error:
                lines, failures = [], [f"{name}.json lacks what the summary needs: {error!r}"]
            body += lines + [""]
        if statuses.get(name, "0") not in ("0", "1") and not failures:
            failures = [f"exit status {statuses[name]}"]
        body += [f"- FAIL: {failure}" for failure in failures] + ([""] if failures else [])
        summary.append([name, "PASS" if not failures else "FAIL", "; ".join(failures)[:200] or "-"])
        all_failures += failures
    if machine:
        out += [f"Machine: {machine.get('gpu')}; torch {machine.get('torch')}; Python {machine.get('python')}; "
                f"host {machine.get('host')}; date {machine.get('date')}.", ""]
    if arguments.elapsed_s is not None:
        out += [f"Whole run: {arguments.elapsed_s:.0f} s.", ""]
    out += _table(["benchmark", "targets", "failures"], summary) + [""] + body
    path = os.path.join(arguments.directory, "RESULTS.md")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(out))
    print("\n".join(out))
    print(f"\nwritten to {path}")
    return 2 if missing else 1 if all_failures else 0


if __name__ == "__main__":
    sys.exit(main())

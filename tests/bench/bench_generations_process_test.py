#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`cuda-agent bench --generations` on CPU slots: the generations of tests/data/generations
(load_inline and load in several styles, one broken, one whose sources need it to run)
against a KernelBench-shaped tasks folder; every sample scored through the pool, Table 1 and
KernelBench's eval_results.json written; a second run with the same --out scores only the
sample whose result was removed, and gives the same table; report.md and report.html show it.

    bench_generations_process_test.py CUDA_AGENT_BINARY REPOSITORY_ROOT
"""

import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

CORRECT = {0: True, 1: True, 2: False, 3: True, 4: False}


def bench(binary, root, tasks, out):
    done = subprocess.run(
        [binary, "bench", "--generations", str(root / "tests/data/generations"), "--tasks", str(tasks), "--out",
         str(out), "--device", "cpu", "--no-profile", "--slots-per-device", "2", "--build-workers", "1"],
        capture_output=True, text=True, timeout=1100)
    return done.returncode, done.stdout + done.stderr


def main() -> int:
    binary, root = sys.argv[1], pathlib.Path(sys.argv[2])
    failures = []
    with tempfile.TemporaryDirectory(prefix="cuda-agent-bench-") as directory:
        work = pathlib.Path(directory)
        work.chmod(0o755)
        tasks = work / "tasks"
        (tasks / "level1").mkdir(parents=True)
        shutil.copy(root / "tests/adversarial/tasks/cpu/relu.py", tasks / "level1" / "1_ReLU.py")
        out = work / "scored"

        status, output = bench(binary, root, tasks, out)
        print(output[-4000:])
        if status != 0:
            failures.append(f"the first run exited {status}")
        results = json.loads((out / "results.json").read_text())
        table = {str(row["level"]): row for row in results["table"]}
        overall = table.get("all", {})
        if overall.get("samples") != 5 or overall.get("correct") != 3 or abs(overall.get("pass_rate", 0) - 0.6) > 1e-9:
            failures.append(f"Table 1 overall row: {overall}")
        # The element sample 2 never writes holds whatever the memory held: the poison, a finite
        # value, or one that differs from call to call.
        rejections = dict(overall.get("rejections", {}))
        never_written = sum(rejections.pop(reason, 0) for reason in ("non_finite", "value_mismatch", "nondeterministic"))
        if never_written != 1 or rejections != {"unresolved_sources": 1}:
            failures.append(f"rejections: {overall.get('rejections')}")
        kernelbench = json.loads((out / "eval_results.json").read_text())
        entries = kernelbench.get("1", [])
        got = {entry["sample_id"]: entry["correctness"] for entry in entries}
        if got != CORRECT:
            failures.append(f"eval_results.json correctness by sample: {got}")
        if any(entry["metadata"].get("evaluator") != "cuda-agent" for entry in entries):
            failures.append("eval_results.json entries do not say who scored them")
        if not (out / "candidates" / "level_1_problem_1_sample_3" / "kernels" / "relu_from_files.cpp").exists():
            failures.append("the laid-out load generation is not kept under candidates/")
        # The reports beside results.json, with its numbers (tests/bench/bench_report_browser_test.py
        # loads such a page in a browser).
        if "report.html" not in output or not (out / "report.md").exists() or not (out / "report.html").exists():
            failures.append("report.md and report.html are not written, or not named in the summary")
        elif "| all | 5 | 1 | 3 | 60.0% |" not in (out / "report.md").read_text(encoding="utf-8"):
            failures.append("report.md's overall row differs from results.json")
        else:
            page = (out / "report.html").read_text(encoding="utf-8")
            shown = re.search(r'<td data-metric="pass_rate" data-level="all" data-value="([^"]+)">([^<]*)</td>', page)
            if not shown or float(shown.group(1)) != overall.get("pass_rate") or shown.group(2) != "60.0%":
                failures.append(f"report.html's overall pass rate: {shown.group(0) if shown else None}")

        (out / "samples" / "level_1_problem_1_sample_1.json").unlink()
        status, output = bench(binary, root, tasks, out)
        print(output[-2000:])
        if status != 0:
            failures.append(f"the second run exited {status}")
        if "4 already scored" not in output or "1 to score" not in output:
            failures.append("the second run did not keep what the first scored")
        again = {str(row["level"]): row for row in json.loads((out / "results.json").read_text())["table"]}
        if again.get("all", {}).get("pass_rate") != overall.get("pass_rate"):
            failures.append(f"the resumed table differs: {again.get('all')}")
    for failure in failures:
        print("FAILED: " + failure)
    if failures:
        return 1
    print("PASS: five generations scored through the pool, Table 1, eval_results.json and the reports written, resumed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

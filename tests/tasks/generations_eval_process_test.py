#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`cuda-agent eval TASK GENERATION.py` on the CPU: a KernelBench generation of
tests/data/generations is laid out, built by the compile driver and verified in the sandbox
like any candidate; one whose sources need it to run is refused before any build. (The
other forms and a broken one go through `cuda-agent bench`: tests/bench.)

    generations_eval_process_test.py CUDA_AGENT_BINARY REPOSITORY_ROOT
"""

import concurrent.futures
import json
import pathlib
import subprocess
import sys
import tempfile

EXPECTED = {
    "level_1_problem_1_sample_0_kernel.py": (None, 1),
    "level_1_problem_1_sample_4_kernel.py": ("unresolved_sources", -1),
}


def evaluate(binary: str, root: pathlib.Path, work: pathlib.Path, name: str) -> tuple[str, int, dict, str]:
    out = work / (name + ".json")
    done = subprocess.run(
        [binary, "eval", str(root / "tests/adversarial/tasks/cpu/relu.py"), str(root / "tests/data/generations" / name),
         "--device", "cpu", "--no-profile", "--quiet", "--json", str(out), "--work-dir", str(work / name)],
        capture_output=True, text=True, timeout=900)
    document = json.loads(out.read_text()) if out.exists() else {}
    return name, done.returncode, document, done.stdout + done.stderr


def main() -> int:
    binary, root = sys.argv[1], pathlib.Path(sys.argv[2])
    failures = []
    with tempfile.TemporaryDirectory(prefix="cuda-agent-generations-") as directory:
        work = pathlib.Path(directory)
        work.chmod(0o755)
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(lambda name: evaluate(binary, root, work, name), sorted(EXPECTED)))
    for name, status, document, output in results:
        reason, reward = EXPECTED[name]
        got_reason = (document.get("rejection") or {}).get("reason")
        got_reward = (document.get("reward") or {}).get("value")
        generation = document.get("generation") or {}
        print(f"{name}: exit {status}, reward {got_reward}, rejection {got_reason}, "
              f"build {generation.get('build_function')} line {generation.get('build_line')}")
        if (got_reason, got_reward) != (reason, reward) or status != (0 if reason is None else 1):
            failures.append(f"{name}: expected {reason} with reward {reward}, got {got_reason} with reward "
                            f"{got_reward} (exit {status})\n{output[-3000:]}")
        if reason != "unresolved_sources" and not generation.get("build_function"):
            failures.append(f"{name}: the result does not say how the generation was built")
        if reason == "unresolved_sources" and document.get("evaluation", {}).get("compile", {}).get("succeeded"):
            failures.append(f"{name}: built although its sources are unknown")
    for failure in failures:
        print("FAILED: " + failure)
    if failures:
        return 1
    print("PASS: every generation scored as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())

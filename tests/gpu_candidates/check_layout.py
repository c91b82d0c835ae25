#!/usr/bin/env python3
"""Checks that the GPU candidates and their manifest agree, without building anything:

  * every task named in manifest.tsv exists in tests/data/kernelbench and has a correct/
    candidate, and every broken variant the manifest names exists;
  * every candidate directory is named by the manifest (no stray, unevaluated variants);
  * each candidate holds model_new.py (defining ModelNew, importing cuda_extension) and
    kernels/ with a binding.cpp that declares PYBIND11_MODULE(TORCH_EXTENSION_NAME, ...) and at
    least one .cu file;
  * each broken variant is a small change of correct/: at most MAX_CHANGED_LINES lines differ
    over all files, and the same files exist in both.

Usage: check_layout.py [ROOT]   ROOT: the candidates directory (default: this file's directory).
Exit status 0 when everything holds, 1 with a list of problems.
"""
from __future__ import annotations

import difflib
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
TASKS = HERE.parents[1] / "tests" / "data" / "kernelbench"
MAX_CHANGED_LINES = 4
SOURCE_SUFFIXES = {".py", ".cu", ".cuh", ".cpp", ".h"}


def candidate_files(directory: pathlib.Path) -> dict[str, list[str]]:
    files = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts:
            files[str(path.relative_to(directory))] = path.read_text().splitlines()
    return files


def check_candidate(root: pathlib.Path, directory: pathlib.Path, problems: list[str]) -> None:
    where = directory.relative_to(root)
    model_new = directory / "model_new.py"
    if not model_new.is_file():
        problems.append(f"{where}: no model_new.py")
        return
    text = model_new.read_text()
    if "import cuda_extension" not in text or "class ModelNew" not in text:
        problems.append(f"{where}: model_new.py must import cuda_extension and define ModelNew")
    binding = directory / "kernels" / "binding.cpp"
    if not binding.is_file() or "PYBIND11_MODULE(TORCH_EXTENSION_NAME" not in binding.read_text():
        problems.append(f"{where}: kernels/binding.cpp must define PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)")
    if not list((directory / "kernels").glob("*.cu")):
        problems.append(f"{where}: kernels/ has no .cu file")


def changed_lines(correct: dict[str, list[str]], broken: dict[str, list[str]]) -> int:
    count = 0
    for name in correct:
        for line in difflib.unified_diff(correct[name], broken.get(name, []), lineterm="", n=0):
            if line.startswith(("+", "-")) and not line.startswith(("+++", "---")):
                count += 1
    return count


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else HERE
    problems: list[str] = []
    named: set[pathlib.Path] = set()
    rows = [line.split("\t") for line in (root / "manifest.tsv").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    for number, row in enumerate(rows, start=1):
        if len(row) != 7:
            problems.append(f"manifest.tsv row {number}: expected 7 tab-separated fields, got {len(row)}")
            continue
        task, variant, weight, detection, _, expected, _ = row
        level, _, stem = task.partition("/")
        if not (TASKS / level / f"{stem}.py").is_file():
            problems.append(f"manifest.tsv: {task} is not a task in tests/data/kernelbench")
        if weight not in ("light", "heavy") or detection not in ("required", "likely") or not expected:
            problems.append(f"manifest.tsv: {task}/{variant}: bad gpu_memory, detection or expected field")
        if not variant.startswith("broken"):
            problems.append(f"manifest.tsv: {task}/{variant}: variant names start with 'broken'")
        correct, broken = root / task / "correct", root / task / variant
        named.update({correct, broken})
        for directory in (correct, broken):
            if not directory.is_dir():
                problems.append(f"{directory.relative_to(root)}: missing")
        if not (correct.is_dir() and broken.is_dir()):
            continue
        check_candidate(root, broken, problems)
        good, bad = candidate_files(correct), candidate_files(broken)
        if set(good) != set(bad):
            problems.append(f"{task}/{variant}: files differ from correct/: {sorted(set(good) ^ set(bad))}")
        changed = changed_lines(good, bad)
        if changed == 0:
            problems.append(f"{task}/{variant}: identical to correct/")
        elif changed > MAX_CHANGED_LINES:
            problems.append(f"{task}/{variant}: {changed} changed lines; a broken variant is a minimal change")
    for correct in sorted({path for path in named if path.name == "correct"}):
        if correct.is_dir():
            check_candidate(root, correct, problems)
    for directory in sorted(p.parent for p in root.glob("level*/*/*/model_new.py")):
        if directory not in named:
            problems.append(f"{directory.relative_to(root)}: not named in manifest.tsv")
    tasks = {row[0] for row in rows if len(row) == 7}
    for problem in problems:
        print(f"problem: {problem}")
    print(f"{len(tasks)} tasks, {len(rows)} broken variants: {'ok' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks that the GPU candidates and their manifest agree, without building anything:

  * every task named in manifest.tsv exists in tests/data/kernelbench and has a correct/
    candidate, and every broken variant the manifest names exists;
  * every candidate directory is named by the manifest (no stray, unevaluated variants);
  * each broken variant names its bug kind and what it breaks, and the expected rejections are
    reasons the verifier has;
  * each candidate holds model_new.py (importing cuda_extension, defining ModelNew whose
    __init__ has the task Model's parameters, names and defaults, and whose forward calls
    nothing but cuda_extension functions and a few Python builtins) and kernels/ with only
    *.cu *.cuh *.cpp *.h files, a binding.cpp that declares
    PYBIND11_MODULE(TORCH_EXTENSION_NAME, ...) and at least one .cu file;
  * each broken variant is a small change of correct/: at most MAX_CHANGED_LINES lines differ
    over all files, and the same files exist in both.

Usage: check_layout.py [ROOT]   ROOT: the candidates directory (default: this file's directory).
Exit status 0 when everything holds, 1 with a list of problems.
"""
from __future__ import annotations

import ast
import difflib
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
TASKS = HERE.parents[1] / "tests" / "data" / "kernelbench"
MAX_CHANGED_LINES = 4
SOURCE_SUFFIXES = {".py", ".cu", ".cuh", ".cpp", ".h"}
KERNEL_SUFFIXES = {".cu", ".cuh", ".cpp", ".h"}
# Rejection reasons of evaluation.hpp that a wrong kernel can produce once it runs.
VERIFIER_REASONS = {"value_mismatch", "shape_mismatch", "dtype_mismatch", "non_finite", "nondeterministic", "crashed",
                    "timeout", "output_structure", "runtime_error"}
# Calls ModelNew.forward may make besides cuda_extension.<function>: argument plumbing and errors.
ALLOWED_BUILTINS = {"int", "float", "bool", "len", "list", "tuple", "dict", "isinstance", "getattr", "ValueError",
                    "TypeError"}


def class_method(tree: ast.Module, class_name: str, method: str) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    return item
    return None


def parameters(function: ast.FunctionDef) -> list[str]:
    """Names and defaults, as source text: what a caller of the constructor relies on."""
    arguments = function.args
    positional = arguments.posonlyargs + arguments.args
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    described = [a.arg + ("" if d is None else "=" + ast.unparse(d)) for a, d in zip(positional, defaults)]
    described += [f"*{arguments.vararg.arg}"] if arguments.vararg else []
    described += [a.arg + ("" if d is None else "=" + ast.unparse(d))
                  for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults)]
    described += [f"**{arguments.kwarg.arg}"] if arguments.kwarg else []
    return described


def forward_calls_outside_extension(forward: ast.FunctionDef) -> list[str]:
    found = []
    for node in ast.walk(forward):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name)
                and function.value.id == "cuda_extension"):
            continue
        if isinstance(function, ast.Name) and function.id in ALLOWED_BUILTINS:
            continue
        found.append(ast.unparse(function))
    return found


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
    check_model_new(where, ast.parse(text), task_file(directory), problems)
    for path in sorted((directory / "kernels").rglob("*")):
        if path.is_file() and path.suffix not in KERNEL_SUFFIXES:
            problems.append(f"{where}: kernels/{path.relative_to(directory / 'kernels')}: only *.cu *.cuh *.cpp *.h "
                            "files belong in kernels/")
    binding = directory / "kernels" / "binding.cpp"
    if not binding.is_file() or "PYBIND11_MODULE(TORCH_EXTENSION_NAME" not in binding.read_text():
        problems.append(f"{where}: kernels/binding.cpp must define PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)")
    if not list((directory / "kernels").glob("*.cu")):
        problems.append(f"{where}: kernels/ has no .cu file")


def task_file(candidate: pathlib.Path) -> pathlib.Path:
    return TASKS / candidate.parents[1].name / f"{candidate.parent.name}.py"


def check_model_new(where: pathlib.Path, tree: ast.Module, task: pathlib.Path, problems: list[str]) -> None:
    init, forward = class_method(tree, "ModelNew", "__init__"), class_method(tree, "ModelNew", "forward")
    if init is None or forward is None:
        problems.append(f"{where}: ModelNew must define __init__ and forward")
        return
    if task.is_file():
        reference = class_method(ast.parse(task.read_text()), "Model", "__init__")
        if reference is not None and parameters(reference) != parameters(init):
            problems.append(f"{where}: ModelNew.__init__({', '.join(parameters(init))}) differs from the task's "
                            f"Model.__init__({', '.join(parameters(reference))})")
    outside = forward_calls_outside_extension(forward)
    if outside:
        problems.append(f"{where}: ModelNew.forward calls {', '.join(sorted(set(outside)))}; only cuda_extension "
                        "functions may compute")
    if not any(isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "cuda_extension"
               for node in ast.walk(forward)):
        problems.append(f"{where}: ModelNew.forward never calls cuda_extension")


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
        task, variant, weight, detection, bug_class, expected, description = row
        level, _, stem = task.partition("/")
        if not (TASKS / level / f"{stem}.py").is_file():
            problems.append(f"manifest.tsv: {task} is not a task in tests/data/kernelbench")
        if not re.fullmatch(r"light|heavy:[1-9][0-9]*", weight) or detection not in ("required", "likely") \
                or not expected:
            problems.append(f"manifest.tsv: {task}/{variant}: bad gpu_memory, detection or expected field")
        if not bug_class.strip() or not description.strip():
            problems.append(f"manifest.tsv: {task}/{variant}: name the bug kind and what the variant breaks")
        unknown = set(expected.split(",")) - VERIFIER_REASONS
        if unknown:
            problems.append(f"manifest.tsv: {task}/{variant}: expected rejection {', '.join(sorted(unknown))} is not a "
                            "reason the verifier gives for a kernel that runs")
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
            check_candidate(root, directory, problems)
    tasks = {row[0] for row in rows if len(row) == 7}
    for problem in problems:
        print(f"problem: {problem}")
    print(f"{len(tasks)} tasks, {len(rows)} broken variants: {'ok' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

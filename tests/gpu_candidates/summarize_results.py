#!/usr/bin/env python3
"""Reads the `cuda-agent eval --json` results that run_all.sh wrote and prints one row per
candidate: the verdict on each task's correct candidate and the rejection (reason and message)
of each broken variant listed in the manifest. Exit status 1 when a correct candidate is not
accepted, a `required` broken variant is accepted, a result is missing, or a broken variant was
rejected before verification ran.

Usage: summarize_results.py MANIFEST OUT_DIR [FILTER...]
Only the candidates listed in OUT_DIR/evaluated.txt ("level/task variant" per line, written by
run_all.sh) are reported when that file exists. Besides the report on standard output it writes
OUT_DIR/summary.md (one Markdown table row per broken variant: task, level, correct accepted?,
broken variant, bug kind, rejected with which reason) and OUT_DIR/summary.tsv (the same as
tab-separated fields, with the messages, for scripts).
"""
from __future__ import annotations

import json
import pathlib
import sys
import textwrap

# Rejections that happen before the verifier has looked at any output: a broken variant rejected
# for one of these did not exercise the check it was written for.
BEFORE_VERIFICATION = {"compile_error", "load_error", "interface_mismatch", "state_dict_mismatch", "harness_error"}


def read_manifest(path: pathlib.Path, filters: list[str]) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        task, variant, weight, detection, bug_class, expected, description = line.split("\t")
        if filters and not any(f in task for f in filters):
            continue
        rows.append({"task": task, "variant": variant, "detection": detection, "bug_class": bug_class,
                     "expected": expected.split(","), "description": description})
    return rows


def outcome(out_dir: pathlib.Path, task: str, variant: str) -> dict:
    """accepted (True, False, or None when there is no usable result), reason, message, seconds."""
    level, stem = task.split("/", 1)
    base = str(out_dir / level / f"{stem}.{variant}")

    def read(suffix: str) -> str | None:
        path = pathlib.Path(base + suffix)
        return path.read_text(errors="replace").strip() if path.exists() else None

    seconds = read(".seconds") or "?"
    rc = read(".rc") or "?"
    text = read(".json")
    if text is None:
        tail = (read(".log") or "").splitlines()[-3:]
        why = "timed out" if rc in ("124", "137") else f"exit status {rc}"
        return {"accepted": None, "reason": "no_result", "message": f"no JSON result ({why}): " + " | ".join(tail),
                "seconds": seconds}
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        return {"accepted": None, "reason": "no_result", "message": f"unreadable JSON: {error}", "seconds": seconds}
    # `cuda-agent eval --json` writes {task, candidate, device, evaluation, rejection}; a bare
    # Evaluation is read too.
    evaluation = document.get("evaluation", document)
    compile_result = evaluation.get("compile") or {}
    verification = evaluation.get("verification") or {}
    rejection = document.get("rejection") or verification.get("rejection") or {}
    if compile_result and not compile_result.get("succeeded", True) and not verification.get("rejection"):
        diagnostics = [d for d in compile_result.get("diagnostics") or [] if d.get("severity", "error") == "error"]
        first = diagnostics[0] if diagnostics else {}
        message = (f"{first.get('file', '')}:{first.get('line', '')}: {first.get('message', '')}" if first
                   else (compile_result.get("log") or rejection.get("message") or "")[-300:])
        return {"accepted": False, "reason": "compile_error", "message": message, "seconds": seconds}
    accepted = evaluation.get("correct", verification.get("correct"))
    return {"accepted": bool(accepted) if accepted is not None else None,
            "reason": rejection.get("reason", "" if accepted else "unknown"),
            "message": rejection.get("message", ""), "seconds": seconds}


def main() -> int:
    manifest, out_dir, filters = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3:]
    rows = read_manifest(manifest, filters)
    evaluated_list = out_dir / "evaluated.txt"
    if evaluated_list.exists():
        evaluated = {tuple(line.split()) for line in evaluated_list.read_text().splitlines() if line.strip()}
        rows = [row for row in rows if (row["task"], row["variant"]) in evaluated]
    if not rows:
        print("no results to summarize")
        return 1
    tasks = list(dict.fromkeys(row["task"] for row in rows))
    failures, warnings = [], []
    table = []  # one entry per broken variant, for summary.md and summary.tsv
    width = max(len(task) for task in tasks)
    print(f"{'task':<{width}}  {'variant':<16} verdict")
    print("-" * (width + 100))
    correct_accepted = 0
    for task in tasks:
        good = outcome(out_dir, task, "correct")
        if good["accepted"] is True:
            correct_accepted += 1
            print(f"{task:<{width}}  {'correct':<16} accepted ({good['seconds']} s)")
        else:
            print(f"{task:<{width}}  {'correct':<16} REJECTED " +
                  textwrap.shorten(f"{good['reason']}: {good['message']}", width=150, placeholder=" ..."))
            failures.append(f"{task}/correct: {good['reason']}: {good['message']}")
        for row in (r for r in rows if r["task"] == task):
            bad = outcome(out_dir, task, row["variant"])
            label = f"{row['variant']}"
            status = "met"
            if bad["accepted"] is True:
                text = f"ACCEPTED: the {row['bug_class']} was not caught"
                problem = f"{task}/{row['variant']}: accepted although {row['description']}"
                status = "FAIL" if row["detection"] == "required" else "warning"
                (failures if row["detection"] == "required" else warnings).append(problem)
            elif bad["accepted"] is None:
                text = f"NO RESULT: {bad['message']}"
                status = "FAIL"
                failures.append(f"{task}/{row['variant']}: {bad['message']}")
            else:
                text = f"{bad['reason']}: {bad['message']}"
                if bad["reason"] in BEFORE_VERIFICATION:
                    status = "FAIL"
                    failures.append(f"{task}/{row['variant']}: rejected before verification ({bad['reason']}): "
                                    f"{bad['message']}")
                elif bad["reason"] not in row["expected"]:
                    status = "warning"
                    warnings.append(f"{task}/{row['variant']}: rejected as {bad['reason']}, "
                                    f"expected {' or '.join(row['expected'])}")
            print(f"{'':<{width}}  {label:<16} " + textwrap.shorten(text, width=150, placeholder=" ..."))
            table.append({"task": task, "good": good, "row": row, "bad": bad,
                          "status": "FAIL" if good["accepted"] is not True else status})
    print()
    for warning in warnings:
        print(f"WARNING {warning}")
    for failure in failures:
        print(f"FAIL {failure}")
    required = [r for r in rows if r["detection"] == "required"]
    rejected = sum(1 for r in required if outcome(out_dir, r["task"], r["variant"])["accepted"] is False)
    totals = (f"{correct_accepted}/{len(tasks)} correct candidates accepted, {rejected}/{len(required)} required broken "
              f"variants rejected, {len(rows) - len(required)} likely variants, {len(warnings)} warnings")
    print(totals)
    write_tables(out_dir, table, totals, failures)
    return 1 if failures else 0


def verdict_text(result: dict) -> str:
    if result["accepted"] is True:
        return "accepted"
    if result["accepted"] is None:
        return f"no result ({result['message']})"
    return f"rejected: {result['reason']}"


def one_line(text: str, width: int) -> str:
    return textwrap.shorten(" ".join(text.split()), width=width, placeholder=" ...") if text else ""


def write_tables(out_dir: pathlib.Path, table: list[dict], totals: str, failures: list[str]) -> None:
    """summary.md for people, summary.tsv for scripts; one row per broken variant."""
    columns = ["task", "level", "correct", "correct_seconds", "broken_variant", "bug_kind", "detection",
               "expected", "broken", "broken_message", "expectation"]
    tsv = ["\t".join(columns)]
    markdown = [f"# GPU candidates: {totals}", "",
                "| task | level | correct: accepted? | broken variant | bug kind | broken: rejected with which reason? "
                "| expectation |", "|---|---|---|---|---|---|---|"]
    for entry in table:
        task, good, row, bad = entry["task"], entry["good"], entry["row"], entry["bad"]
        level, stem = task.split("/", 1)
        fields = [stem, level, verdict_text(good), good["seconds"], row["variant"], row["bug_class"], row["detection"],
                  ",".join(row["expected"]), verdict_text(bad), bad["message"], entry["status"]]
        tsv.append("\t".join(" ".join(str(field).split()) for field in fields))
        broken = verdict_text(bad)
        if bad["accepted"] is False and bad["message"]:
            broken += " (" + one_line(bad["message"], 160) + ")"
        markdown.append("| " + " | ".join(cell.replace("|", "\\|") for cell in
                                          [stem, level, verdict_text(good), row["variant"], row["bug_class"], broken,
                                           entry["status"]]) + " |")
    if failures:
        markdown += ["", "## Failed expectations", ""] + [f"- {one_line(failure, 300)}" for failure in failures]
    (out_dir / "summary.tsv").write_text("\n".join(tsv) + "\n")
    (out_dir / "summary.md").write_text("\n".join(markdown) + "\n")


if __name__ == "__main__":
    sys.exit(main())

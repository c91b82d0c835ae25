#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The page of `cuda-agent bench` in a browser: `cuda-agent bench --report-only` writes
report.md and report.html from an OUT folder made here (two levels; samples timed, untimed,
rejected, and of a task unfit to score; a task whose name has <&> in it), and headless
Chromium loads the page. Its DOM must have the tables, every plot with a point per value,
and the numbers of results.json, whose table this script computes on its own from the
samples (so the C++ metrics and their rendering are checked against an independent sum).
Where Chromium is missing, the same checks run on the file as written and the test reports
itself skipped.

    bench_report_browser_test.py CUDA_AGENT_BINARY REPOSITORY_ROOT
"""

import html.parser
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

NO_VALUE = "\u2013"
P_VALUES = [0.0, 0.5, 0.8, 1.0, 1.5, 2.0]
ODD_TASK = "Odd<&>\"Name|x"  # problem 2's name


# ---------------------------------------------------------------------------------------
# The OUT folder of a run, as `cuda-agent bench` leaves it.

def speedup(baseline, value, verdict):
    return {"baseline": baseline, "speedup": value, "interval": [value * 0.95, value * 1.05], "confidence": 0.95,
            "threshold": 0.05, "verdict": verdict}


def record(tasks, level, problem, task, sample, reward, evaluation, rejection=None):
    name = f"level_{level}_problem_{problem}_sample_{sample}"
    return {"sample": name, "level": level, "problem": problem, "sample_id": sample,
            "source": f"/generations/{name}_kernel.py", "task": str(tasks / f"level{level}" / f"{problem}_{task}.py"),
            "outcome": "evaluated", "message": "", "generation": None, "evaluation": evaluation,
            "reward": {"value": reward, "label": "", "explanation": ""}, "rejection": rejection, "wall_seconds": 1.0}


def correct(eager=None, compile_=None):
    evaluation = {"compile": {"succeeded": True}, "verification": {"correct": True, "rejection": None}}
    if eager:
        evaluation["profile"] = {"versus_eager": speedup("eager", *eager),
                                 "versus_compile": speedup("compile", *compile_), "rejection": None}
    return evaluation


def rejected(reason, message):
    rejection = {"reason": reason, "message": message, "details": {}}
    if reason == "compile_error":
        return {"compile": {"succeeded": False}, "verification": None}, rejection
    return {"compile": {"succeeded": True}, "verification": {"correct": False, "rejection": rejection}}, rejection


def samples(tasks):
    value_mismatch = rejected("value_mismatch", "differs at <0, 1> & beyond")
    compile_error = rejected("compile_error", "nvcc: error")
    unfit = rejected("task_unfit", "a null model passes <every> input")
    return [
        record(tasks, 1, 1, "ReLU", 0, 3, correct((4.0, "FASTER"), (1.25, "FASTER"))),
        record(tasks, 1, 1, "ReLU", 1, -1, *value_mismatch),
        record(tasks, 1, 2, ODD_TASK, 0, 1, correct()),
        record(tasks, 1, 2, ODD_TASK, 1, 1, correct((1.02, "AMBIGUOUS"), (0.6, "SLOWER"))),
        record(tasks, 2, 3, "Gemm", 0, -1, *compile_error),
        record(tasks, 2, 3, "Gemm", 1, 2, correct((3.0, "FASTER"), (0.9, "SAME"))),
        record(tasks, 2, 4, "Copy", 0, 0, *unfit),
    ]


def is_correct(sample):
    evaluation = sample["evaluation"]
    verification = evaluation.get("verification") or {}
    return evaluation["compile"]["succeeded"] and verification.get("correct", False)


def scored(sample):
    return (sample["rejection"] or {}).get("reason") != "task_unfit"


def solved_speedup(sample, baseline):
    profile = sample["evaluation"].get("profile")
    return profile[f"versus_{baseline}"]["speedup"] if is_correct(sample) and profile else None


def expected_row(level, rows):
    """A row of Table 1 as table_metrics.hpp defines it, summed here."""
    counted = [sample for sample in rows if scored(sample)]
    count = len(counted)
    row = {"level": level if level else "all", "samples": count, "tasks": len({s["task"] for s in rows}),
           "correct": sum(is_correct(s) for s in counted), "geomean_speedup": {}, "fast_p": {}}
    row["pass_rate"] = row["correct"] / count if count else 0
    for baseline in ("eager", "compile"):
        faster = [s for s in counted if is_correct(s) and s["evaluation"].get("profile")
                  and s["evaluation"]["profile"][f"versus_{baseline}"]["verdict"] == "FASTER"]
        row[f"faster_than_{baseline}_rate"] = len(faster) / count if count else 0
        speedups = [v for v in (solved_speedup(s, baseline) for s in counted) if v is not None]
        logs = sum(math.log(v) for v in speedups)
        row["geomean_speedup"][baseline] = {"solved": math.exp(logs / len(speedups)) if speedups else None,
                                            "all_failures_as_1x": math.exp(logs / count) if count else None}
        row["fast_p"][baseline] = {f"{p:g}": (sum(v > p for v in speedups) / count if count else 0) for p in P_VALUES}
    return row


def make_out(out, tasks):
    records = samples(tasks)
    (out / "samples").mkdir(parents=True)
    for sample in records:
        (out / "samples" / f"{sample['sample']}.json").write_text(json.dumps(sample, indent=2), encoding="utf-8")
    # Laid-out sources for the single-file generations of ReLU only.
    for name in ("level_1_problem_1_sample_0", "level_1_problem_1_sample_1"):
        (out / "candidates" / name / "kernels").mkdir(parents=True)
    levels = sorted({s["level"] for s in records})
    table = [expected_row(level, [s for s in records if s["level"] == level]) for level in levels]
    table.append(expected_row(0, records))
    results = {"generations": "/generations/<model>", "tasks": str(tasks), "table": table, "samples": records,
               "unscored": 1}
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    return results


# ---------------------------------------------------------------------------------------
# The page, read back.

class Element:
    def __init__(self, tag, attributes, parent):
        self.tag, self.attributes, self.parent, self.children = tag, dict(attributes), parent, []

    def walk(self):
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.walk()

    def text(self):
        return "".join(child if isinstance(child, str) else child.text() for child in self.children)

    def find_all(self, tag=None, **attributes):
        return [element for element in self.walk() if (tag is None or element.tag == tag)
                and all(element.attributes.get(name.replace("_", "-")) == value for name, value in attributes.items())]


class TreeBuilder(html.parser.HTMLParser):
    VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "embed", "source", "track", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = self.current = Element("#document", {}, None)

    def handle_starttag(self, tag, attributes):
        element = Element(tag, attributes, self.current)
        self.current.children.append(element)
        if tag not in self.VOID:
            self.current = element

    def handle_startendtag(self, tag, attributes):
        self.current.children.append(Element(tag, attributes, self.current))

    def handle_endtag(self, tag):
        element = self.current
        while element is not None and element.tag != tag:
            element = element.parent
        if element is not None and element.parent is not None:
            self.current = element.parent

    def handle_data(self, data):
        self.current.children.append(data)


def parse(page):
    builder = TreeBuilder()
    builder.feed(page)
    builder.close()
    return builder.root


def rate(value):
    return f"{100 * value:.1f}%"


def times(value):
    return f"{value:.2f}x" if value is not None else NO_VALUE


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


def check_cell(document, failures, expected_text, expected_value, **attributes):
    cells = document.find_all("td", **attributes)
    where = " ".join(f"{name}={value}" for name, value in attributes.items())
    if len(cells) != 1:
        failures.append(f"{len(cells)} cells with {where}")
        return
    cell = cells[0]
    if cell.text() != expected_text:
        failures.append(f"cell {where} shows {cell.text()!r}, not {expected_text!r}")
    shown = cell.attributes.get("data-value")
    if expected_value is None and shown is not None:
        failures.append(f"cell {where} has a value {shown} where there is none")
    if expected_value is not None and (shown is None or not close(float(shown), expected_value)):
        failures.append(f"cell {where} has data-value {shown}, not {expected_value!r}")


def check_tables(document, results, failures):
    for section in ("table-one", "fast-p", "rewards", "rejections", "speedups", "tasks"):
        if not document.find_all("section", id=section):
            failures.append(f"no section {section}")
    for table in ("table-one-rows", "fast-p-rows", "reward-rows", "rejection-rows", "speedup-rows", "task-rows"):
        if not document.find_all("table", id=table):
            failures.append(f"no table {table}")
    for row in results["table"]:
        level = str(row["level"])
        count = row["samples"]
        for metric in ("samples", "tasks", "correct"):
            check_cell(document, failures, str(row[metric]), row[metric], data_metric=metric, data_level=level)
        for metric in ("pass_rate", "faster_than_eager_rate", "faster_than_compile_rate"):
            check_cell(document, failures, rate(row[metric]) if count else NO_VALUE, row[metric] if count else None,
                       data_metric=metric, data_level=level)
        for baseline in ("eager", "compile"):
            for convention, key in (("solved", "solved"), ("all", "all_failures_as_1x")):
                value = row["geomean_speedup"][baseline][key]
                check_cell(document, failures, times(value), value, data_metric=f"geomean_{baseline}_{convention}",
                           data_level=level)
            for p, share in row["fast_p"][baseline].items():
                check_cell(document, failures, rate(share) if count else NO_VALUE, share if count else None,
                           data_metric="fast_p", data_level=level, data_baseline=baseline, data_p=p)
    paper = document.find_all("tr", data_level="all", data_source="paper")
    if len(paper) != 1 or "98.8%" not in paper[0].text() or "2.11x" not in paper[0].text():
        failures.append("the paper's overall row is missing or wrong")


def check_plots(document, results, failures):
    table = {str(row["level"]): row for row in results["table"]}
    for baseline in ("eager", "compile"):
        plots = document.find_all("svg", id=f"fast-p-{baseline}")
        if len(plots) != 1:
            failures.append(f"{len(plots)} plots fast-p-{baseline}")
            continue
        curves = plots[0].find_all("polyline")
        if sorted(curve.attributes.get("data-level") for curve in curves) != sorted(table):
            failures.append(f"fast-p-{baseline} has curves for {[c.attributes.get('data-level') for c in curves]}")
        for curve in curves:
            if len(curve.attributes.get("points", "").split()) != len(P_VALUES):
                failures.append(f"fast-p-{baseline} curve {curve.attributes.get('data-level')} is not {len(P_VALUES)} "
                                "points")
        points = plots[0].find_all("circle")
        if len(points) != len(P_VALUES) * len(table):
            failures.append(f"fast-p-{baseline} has {len(points)} points")
        for point in points:
            level, p = point.attributes.get("data-level"), point.attributes.get("data-p")
            expected = table.get(level, {}).get("fast_p", {}).get(baseline, {}).get(p)
            if expected is None or not close(float(point.attributes.get("data-value", "nan")), expected):
                failures.append(f"fast-p-{baseline} point level {level} p {p}: {point.attributes.get('data-value')} "
                                f"for {expected}")
        plots = document.find_all("svg", id=f"speedups-{baseline}")
        if len(plots) != 1:
            failures.append(f"{len(plots)} plots speedups-{baseline}")
            continue
        expected = {s["sample"]: solved_speedup(s, baseline) for s in results["samples"]
                    if scored(s) and solved_speedup(s, baseline) is not None}
        shown = {point.attributes.get("data-sample"): float(point.attributes.get("data-value", "nan"))
                 for point in plots[0].find_all("circle")}
        if shown.keys() != expected.keys() or any(not close(shown[name], expected[name]) for name in expected):
            failures.append(f"speedups-{baseline} shows {shown}, not {expected}")


def check_tasks(document, out, failures):
    rows = [row for row in document.find_all("tr") if "data-task" in row.attributes]
    labels = [row.find_all("td", data_metric="task")[0].text() for row in rows]
    if labels != ["1_ReLU", f"2_{ODD_TASK}", "3_Gemm", "4_Copy"]:
        failures.append(f"the tasks are listed as {labels}")
    best = {label: row.attributes.get("data-sample") for label, row in zip(labels, rows)}
    # ReLU's first sample, the odd task's timed sample (a reward of 1 each, but correct and
    # timed against compile), Gemm's second.
    if best != {"1_ReLU": "level_1_problem_1_sample_0", f"2_{ODD_TASK}": "level_1_problem_2_sample_1",
                "3_Gemm": "level_2_problem_3_sample_1", "4_Copy": "level_2_problem_4_sample_0"}:
        failures.append(f"best samples: {best}")
    for row in rows:
        for link in row.find_all("a"):
            target = link.attributes.get("href", "")
            if not (out / target).exists():
                failures.append(f"the link {target} of {row.attributes.get('data-sample')} points nowhere")
    relu_candidate = rows[0].find_all("td", data_metric="best_candidate")[0].find_all("a") if rows else []
    if not relu_candidate:
        failures.append("the ReLU sample's laid-out candidate is not linked")
    messages = [cell.text() for cell in document.find_all("td", data_metric="best_message")]
    if "a null model passes <every> input" not in messages:
        failures.append(f"the unfit task's message is not shown as text: {messages}")


def check(page, results, out, failures):
    document = parse(page)
    check_tables(document, results, failures)
    check_plots(document, results, failures)
    check_tasks(document, out, failures)


def chromium():
    for name in (os.environ.get("CUDA_AGENT_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def browse(browser, page, profile, *arguments):
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           f"--user-data-dir={profile}", *arguments, page.as_uri()],
                          capture_output=True, text=True, encoding="utf-8", timeout=120)


def main() -> int:
    binary, root = sys.argv[1], pathlib.Path(sys.argv[2])
    failures = []
    with tempfile.TemporaryDirectory(prefix="cuda-agent-report-") as directory:
        work = pathlib.Path(directory)
        out = work / "scored"
        results = make_out(out, work / "tasks")
        done = subprocess.run([binary, "bench", "--report-only", "--out", str(out)], capture_output=True, text=True,
                              encoding="utf-8", timeout=120)
        print(done.stdout + done.stderr)
        if done.returncode != 0 or "report.html" not in done.stdout:
            failures.append(f"bench --report-only exited {done.returncode}")
        page = out / "report.html"
        if not page.exists() or not (out / "report.md").exists():
            failures.append("report.md or report.html was not written")
            page.write_text("")
        written = page.read_text(encoding="utf-8")
        # Nothing to fetch: no script, stylesheet, image or font from elsewhere.
        for outside in ("<script", "<link", "src=", "url(", "@import", "<&>", "<every>"):
            if outside in written:
                failures.append(f"report.html has {outside!r}")
        check(written, results, out, failures)
        if "| all | 6 | 4 | 4 | 66.7% |" not in (out / "report.md").read_text(encoding="utf-8"):
            failures.append("report.md's overall row differs")

        browser = chromium()
        if browser:
            dom = browse(browser, page, work / "profile", "--dump-dom")
            if dom.returncode != 0 or "<svg" not in dom.stdout:
                failures.append(f"chromium --dump-dom exited {dom.returncode}: {dom.stderr[-2000:]}")
            else:
                check(dom.stdout, results, out, failures)
            shot = work / "report.png"
            screen = browse(browser, page, work / "profile", f"--screenshot={shot}", "--window-size=1280,2400")
            image = shot.read_bytes() if shot.exists() else b""
            # A PNG 1280 pixels wide (IHDR), with more than a blank page in it.
            if screen.returncode != 0 or image[:8] != b"\x89PNG\r\n\x1a\n" or int.from_bytes(image[16:20], "big") != 1280 \
                    or len(image) < 30000:
                failures.append(f"the screenshot failed ({screen.returncode}, {len(image)} bytes)")
    for failure in failures:
        print("FAILED: " + failure)
    if failures:
        return 1
    if not browser:
        print("[cuda-agent-test-skipped] the page's checks passed on the file, but chromium is not installed to load "
              "it (Debian: apt-get install chromium)")
        return 0
    print("PASS: report.html loads in headless Chromium with its tables, plots and the numbers of results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

# SPDX-License-Identifier: Apache-2.0
"""Where the time goes: the top kernels of the reference model and of the candidate,
recorded with torch.profiler, as a table (name, calls, total and mean time, share).

Run from a workspace (``python3 <harness>/profile_kernels.py``) or as a module::

    python3 -m cuda_agent_harness.timing.kernel_table --reference model.py --candidate-dir . --build-dir build

On a GPU the rows are device activities (kernels, copies, memsets) with their device
time; on the CPU (``--device cpu``) they are operators with their own CPU time. Times are
per forward call: the totals over ``--iterations`` calls divided by the iterations.
This is for looking, not for judging: it does not flush caches between calls and does
not compare contenders the way the timing session does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Sequence

from ..registry import handler
from ..modules import load_module

DEFAULT_TOP = 15
NAME_WIDTH = 72


def _device_events(profiler: Any, torch: Any) -> list[tuple[str, float]]:
    """(name, device µs) of every device activity the profiler recorded."""
    device_types = {torch.autograd.DeviceType.CUDA}
    if hasattr(torch.autograd.DeviceType, "PrivateUse1"):
        device_types.add(torch.autograd.DeviceType.PrivateUse1)
    rows = []
    for event in profiler.events():
        if getattr(event, "device_type", None) in device_types:
            rows.append((event.name, float(event.time_range.elapsed_us())))
    if rows:
        return rows
    # Older layouts attach device time to operators instead of listing kernels.
    for average in profiler.key_averages():
        total = float(getattr(average, "self_device_time_total", 0) or getattr(average, "self_cuda_time_total", 0) or 0)
        if total > 0:
            rows.extend([(average.key, total / max(average.count, 1))] * average.count)
    return rows


def _cpu_operators(profiler: Any) -> list[tuple[str, float]]:
    rows = []
    for average in profiler.key_averages():
        if average.self_cpu_time_total > 0:
            rows.extend([(average.key, average.self_cpu_time_total / max(average.count, 1))] * average.count)
    return rows


def summarize(rows: Sequence[tuple[str, float]], iterations: int, top: int = DEFAULT_TOP) -> dict:
    """Groups activities by name: calls, total and mean time per forward, share of the total."""
    grouped: dict[str, list[float]] = {}
    for name, duration in rows:
        grouped.setdefault(name, []).append(duration)
    total = sum(sum(durations) for durations in grouped.values())
    ordered = sorted(grouped.items(), key=lambda item: -sum(item[1]))
    kernels = [
        {
            "name": name,
            "calls": len(durations) / iterations,
            "total_us": sum(durations) / iterations,
            "mean_us": sum(durations) / len(durations),
            "share": (sum(durations) / total) if total else 0.0,
        }
        for name, durations in ordered
    ]
    return {
        "total_us": total / iterations,
        "distinct": len(kernels),
        "kernels": kernels[:top],
        "others": {
            "count": max(0, len(kernels) - top),
            "total_us": sum(row["total_us"] for row in kernels[top:]),
        },
    }


def profile_function(function: Callable, inputs: Sequence[Any], torch: Any, device: str, iterations: int = 10,
                     warmup: int = 3, top: int = DEFAULT_TOP) -> dict:
    import warnings

    from torch.profiler import ProfilerActivity, profile

    warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
    with torch.no_grad():
        for _ in range(warmup):
            function(*inputs)
        if device != "cpu":
            torch.cuda.synchronize()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device != "cpu" else [])
        with profile(activities=activities) as profiler:
            for _ in range(iterations):
                function(*inputs)
            if device != "cpu":
                torch.cuda.synchronize()
    rows = _device_events(profiler, torch) if device != "cpu" else _cpu_operators(profiler)
    summary = summarize(rows, iterations, top)
    summary["iterations"] = iterations
    summary["unit"] = "device time" if device != "cpu" else "CPU self time"
    return summary


def format_table(title: str, summary: dict) -> str:
    lines = [
        f"{title}: {summary['total_us']:.1f} µs of {summary['unit']} per forward, "
        f"{summary['distinct']} distinct {'kernels' if summary['unit'] == 'device time' else 'operators'}",
        f"  {'share':>6}  {'total µs':>10}  {'calls':>6}  {'mean µs':>9}  name",
    ]
    for row in summary["kernels"]:
        name = row["name"] if len(row["name"]) <= NAME_WIDTH else row["name"][: NAME_WIDTH - 1] + "…"
        calls = f"{row['calls']:g}"
        lines.append(
            f"  {row['share'] * 100:5.1f}%  {row['total_us']:10.1f}  {calls:>6}  {row['mean_us']:9.2f}  {name}"
        )
    if summary["others"]["count"]:
        lines.append(f"  ({summary['others']['count']} more, {summary['others']['total_us']:.1f} µs in all)")
    return "\n".join(lines)


def build_targets(arguments: argparse.Namespace, torch: Any) -> tuple[list, dict]:
    """The inputs and the models to profile, with the reference's weights loaded into the candidate."""
    device = arguments.device
    reference = load_module(arguments.reference, "model")
    torch.manual_seed(arguments.seed)
    init_inputs = reference.get_init_inputs()
    model = reference.Model(*init_inputs).to(device).eval()
    torch.manual_seed(arguments.seed + 1)
    inputs = [item.to(device) if isinstance(item, torch.Tensor) else item for item in reference.get_inputs()]
    targets: dict[str, Callable] = {}
    if arguments.target in ("reference", "both"):
        targets["reference (eager)"] = model
        if arguments.compile:
            targets["reference (torch.compile)"] = torch.compile(model)
    if arguments.target in ("candidate", "both"):
        for directory in (arguments.build_dir, arguments.candidate_dir):
            if directory and os.path.isdir(directory):
                sys.path.insert(0, os.path.abspath(directory))
        candidate = load_module(os.path.join(arguments.candidate_dir, "model_new.py"), "model_new")
        torch.manual_seed(arguments.seed)
        candidate_model = candidate.ModelNew(*init_inputs)
        candidate_model.load_state_dict(model.state_dict())
        targets["candidate (ModelNew)"] = candidate_model.to(device).eval()
    return inputs, targets


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", default="model.py", help="the task's reference (default: model.py)")
    parser.add_argument("--candidate-dir", default=".", help="where model_new.py is (default: .)")
    parser.add_argument("--build-dir", default="build", help="where the built cuda_extension is (default: build)")
    parser.add_argument("--target", choices=("reference", "candidate", "both"), default="both")
    parser.add_argument("--compile", action="store_true", help="also profile torch.compile of the reference (slow)")
    parser.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--top", type=int, default=DEFAULT_TOP)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return parser


def kernel_report(arguments: argparse.Namespace) -> tuple[dict, str, int]:
    """(report by model, the tables as text, status: 0 fine, 1 a model failed, 2 nothing ran)."""
    import torch

    if arguments.device is None:
        arguments.device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        inputs, targets = build_targets(arguments, torch)
    except Exception as error:
        return {}, f"error: could not set up the models to profile: {type(error).__name__}: {error}", 2
    report = {}
    status = 0
    for title, function in targets.items():
        try:
            report[title] = profile_function(function, inputs, torch, arguments.device, arguments.iterations,
                                             top=arguments.top)
        except Exception as error:
            report[title] = {"error": f"{type(error).__name__}: {error}"}
            status = 1
    blocks = [
        f"{title}: failed: {summary['error']}" if "error" in summary else format_table(title, summary)
        for title, summary in report.items()
    ]
    return report, "\n\n".join(blocks), status


@handler("kernel_table", prepared=True, alone=True)
def kernel_table(args: dict, context) -> dict:
    """Args: the command-line options by name (reference, candidate_dir, build_dir, target,
    compile, iterations, top, seed). Returns {"report", "text", "status"}."""
    arguments = parser().parse_args([])
    for name, value in args.items():
        setattr(arguments, name, value)
    arguments.device = args.get("device", context.device)
    report, text, status = kernel_report(arguments)
    return {"report": report, "text": text, "status": status}


def main(argv: list[str] | None = None) -> int:
    arguments = parser().parse_args(argv)
    report, text, status = kernel_report(arguments)
    if arguments.json and report:
        print(json.dumps(report, indent=1))
    else:
        print(text, file=sys.stderr if status == 2 else sys.stdout)
    return status


if __name__ == "__main__":
    sys.exit(main())

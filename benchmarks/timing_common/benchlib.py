# SPDX-License-Identifier: Apache-2.0
"""Shared by the timing benchmarks: the harness on sys.path, the statistics judge (the
library's C++ verdicts), machine facts, tables, budgets and result files."""

from __future__ import annotations

import datetime
import glob
import json
import math
import os
import platform
import subprocess
import sys
import time

# Keeps torch.cuda.is_available() from initializing the driver in the benchmark's own
# process, which forks the processes that time.
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "resources", "harness"))
KERNELBENCH = os.path.join(ROOT, "tests", "data", "kernelbench")
FIXTURES = os.path.join(ROOT, "tests", "python", "timing_fixtures")


def find_judge(explicit: str | None = None) -> str:
    """The cuda_agent_benchmark_timing_judge program (built with -DCUDA_AGENT_BUILD_BENCHMARKS=ON)."""
    candidates = [explicit, os.environ.get("CUDA_AGENT_TIMING_JUDGE")]
    candidates += sorted(glob.glob(os.path.join(ROOT, "build*", "benchmarks", "cuda_agent_benchmark_timing_judge")))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit(
        "error: cuda_agent_benchmark_timing_judge not found. Build it with\n"
        "  cmake -S . -B build -DCUDA_AGENT_BUILD_BENCHMARKS=ON && cmake --build build --target "
        "cuda_agent_benchmark_timing_judge\nor pass --judge PATH."
    )


class Judge:
    """Statistics and verdicts from the library, through one long-lived judge process."""

    def __init__(self, path: str):
        self.process = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def __call__(self, session: dict, repetition: int | None = None, threshold: float = 0.05) -> dict:
        request = {"session": session, "repetition": repetition, "threshold": threshold}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        if "error" in answer:
            raise RuntimeError(f"judge: {answer['error']}")
        return answer

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def gpu_present() -> bool:
    """Whether an NVIDIA GPU is usable, asked of nvidia-smi: the benchmark's own process
    must not initialize CUDA (it forks the processes that time)."""
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode == 0
    except OSError:
        return False


def machine(torch) -> dict:
    facts = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "gpu": "none (CPU mode)",
    }
    if gpu_present():
        facts["gpu"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,power.limit,clocks.max.sm", "--format=csv,noheader"],
            capture_output=True, text=True, check=False,
        ).stdout.strip()
    return facts


def quantiles(values: list[float], points=(0.0, 0.1, 0.5, 0.9, 1.0)) -> dict:
    if not values:
        return {}
    ordered = sorted(values)
    out = {}
    for point in points:
        position = point * (len(ordered) - 1)
        low = int(math.floor(position))
        high = min(low + 1, len(ordered) - 1)
        out[f"p{int(point * 100)}"] = ordered[low] + (position - low) * (ordered[high] - ordered[low])
    return out


def table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """columns: (key, header, format); format like '{:.3f}'."""
    cells = [[header for _, header, _ in columns]]
    for row in rows:
        cells.append([(fmt.format(row[key]) if row.get(key) is not None else "-") for key, _, fmt in columns])
    widths = [max(len(line[index]) for line in cells) for index in range(len(columns))]
    lines = ["  ".join(cell.rjust(width) if index else cell.ljust(width)
                       for index, (cell, width) in enumerate(zip(line, widths))) for line in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def share_of_budget(left_s: float, parts_left: int, overhead_s: float = 0.0) -> float:
    """The next part's share of a budget: the time left over the parts still owed (this one
    included), less the overhead each part costs outside its share; never negative."""
    return max(0.0, left_s / max(1, parts_left) - overhead_s)


class Budget:
    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.seconds - self.elapsed()


def write_results(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
    print(f"\nresults written to {path}")


def kernelbench_task(relative: str) -> str:
    return os.path.join(KERNELBENCH, relative)


def h100_baselines() -> tuple[dict, dict]:
    directory = os.path.join(KERNELBENCH, "baselines", "H100")
    with open(os.path.join(directory, "baseline_time_torch.json")) as handle:
        eager = json.load(handle)
    with open(os.path.join(directory, "baseline_time_torch_compile_inductor_default.json")) as handle:
        compiled = json.load(handle)
    return eager, compiled


def compile_caches(directory: str) -> dict:
    """Environment that points inductor and Triton at ``directory``, so that processes of
    one benchmark run share compiled kernels (compilation time is not what is measured)."""
    os.makedirs(directory, exist_ok=True)
    return {
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(directory, "inductor"),
        "TRITON_CACHE_DIR": os.path.join(directory, "triton"),
    }


def _prewarm_one(arguments: tuple[str, str, str, str, bool]) -> tuple[str, float, str | None]:
    """Compiles one task's reference as the timing session does (same module, eval mode,
    no_grad, inputs made on the device), filling the shared caches; returns the seconds."""
    task_path, device_kind, backend, mode, pinned = arguments
    started = time.monotonic()
    try:
        import torch

        pin_compiled_kernels(torch, pinned)

        from cuda_agent_harness.timing import contender_timer, devices, input_sets
        from cuda_agent_harness.modules import load_module
        from cuda_agent_harness.timing.request import _compile_mode, build_reference_model

        device = devices.make_device(torch, device_kind)
        reference = load_module(task_path, "cuda_agent_reference")
        model = build_reference_model(torch, reference, 0, device)
        compiled = torch.compile(model, mode=_compile_mode({"mode": mode}), backend=backend)
        timer = contender_timer.ContenderTimer("compile", compiled, device, input_sets.InputFactory(reference.get_inputs, device))
        timer.warm_up(1, min_calls=2, min_seconds=0.0)
        del timer, compiled, model
        if device_kind == "cuda":
            torch.cuda.empty_cache()
        return task_path, time.monotonic() - started, None
    except Exception as error:  # reported; the timing session then compiles live
        return task_path, time.monotonic() - started, f"{type(error).__name__}: {error}"


def pin_compiled_kernels(torch, pinned: bool) -> None:
    """With ``pinned``, inductor skips the on-device benchmarks that choose among kernel
    configurations, so that every process that compiles a model gets the same program.
    Without it (torch.compile's default), each process benchmarks some configurations anew
    at the first call (torch 2.11 does not cache the choice for reductions whose block it
    scales), and two processes can end up with programs a few percent apart. Part of
    inductor's compile cache key, so a prewarm must use the setting its sessions use."""
    import torch._inductor.config as inductor_config

    inductor_config.deterministic = bool(pinned)


def prewarm_compile(task_paths: list[str], device: str, backend: str, mode: str, workers: int,
                    pinned: list[bool] | None = None) -> list[str]:
    """torch.compile of every task's reference in ``workers`` parallel processes (spawned:
    this process must not initialize CUDA), with each task's kernels pinned where ``pinned``
    says so (``pin_compiled_kernels``; None: none). Returns the problems met, one line each."""
    import concurrent.futures
    import multiprocessing

    problems = []
    context = multiprocessing.get_context("spawn")
    started = time.monotonic()
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                                max_tasks_per_child=4) as pool:
        pins = pinned or [False] * len(task_paths)
        jobs = [pool.submit(_prewarm_one, (path, device, backend, mode, pin)) for path, pin in zip(task_paths, pins)]
        for done, job in enumerate(concurrent.futures.as_completed(jobs), 1):
            path, seconds, problem = job.result()
            name = os.path.relpath(path, KERNELBENCH) if path.startswith(KERNELBENCH) else path
            print(f"  prewarm {done}/{len(jobs)} {name}: {seconds:.1f} s" + (f"  ({problem})" if problem else ""),
                  flush=True)
            if problem:
                problems.append(f"{name}: {problem}")
    print(f"  prewarm: {len(task_paths)} tasks compiled in {time.monotonic() - started:.0f} s", flush=True)
    return problems

# SPDX-License-Identifier: Apache-2.0
"""The naive edit-to-verdict flow, as CUDA-Agent's released scripts run it, for comparison:

1. rebuild: a fresh Python process runs ``torch.utils.cpp_extension.load`` over every
   source of ``kernels/`` into an empty build directory (a full rebuild);
2. verify: a fresh Python process imports torch and the extension and compares ModelNew
   with Model on 5 fresh input sets (atol = rtol = 1e-2);
3. profile: a fresh Python process imports torch and the extension, builds
   ``torch.compile(Model)``, and times eager, compile and ModelNew with torch.profiler
   (5 warm-up calls, 10 profiled calls each, device time summed).

    python3 naive_flow.py --workspace DIR [--device cuda] [--out FILE]

Prints one JSON object with the seconds each step took (wall time of its process).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REBUILD = r"""
import glob, os, sys
import torch.utils.cpp_extension as extension
kernels = os.path.join(sys.argv[1], "kernels")
sources = sorted(glob.glob(os.path.join(kernels, "*.cpp")) + glob.glob(os.path.join(kernels, "*.cu")))
extension.load(name="cuda_extension", sources=sources, build_directory=sys.argv[2],
               extra_cuda_cflags=["-O3"], verbose=False)
"""

COMMON = r"""
import importlib.util, os, sys
import torch
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
workspace, build, device = sys.argv[1], sys.argv[2], sys.argv[3]
load(next(os.path.join(build, f) for f in os.listdir(build) if f.startswith("cuda_extension") and f.endswith(".so")),
     "cuda_extension")
reference = load(os.path.join(workspace, "model.py"), "model")
candidate = load(os.path.join(workspace, "model_new.py"), "model_new")
model = reference.Model(*reference.get_init_inputs()).to(device).eval()
model_new = candidate.ModelNew(*reference.get_init_inputs()).to(device).eval()
model_new.load_state_dict(model.state_dict())
"""

VERIFY = COMMON + r"""
with torch.no_grad():
    for trial in range(5):
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in reference.get_inputs()]
        expected = model(*inputs)
        got = model_new(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
        torch.testing.assert_close(got, expected, atol=1e-2, rtol=1e-2)
print("[PASS] verify success")
"""

PROFILE = COMMON + r"""
from torch.profiler import ProfilerActivity, profile
compiled = torch.compile(model)
inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in reference.get_inputs()]
on_gpu = device != "cpu"
def synchronize():
    if on_gpu:
        torch.cuda.synchronize()
def device_time(function):
    with torch.no_grad():
        for _ in range(5):
            function(*inputs)
        synchronize()
        with profile(activities=[ProfilerActivity.CUDA if on_gpu else ProfilerActivity.CPU]) as profiler:
            synchronize()
            for _ in range(10):
                function(*inputs)
            synchronize()
    field = "device_time_total" if on_gpu else "self_cpu_time_total"
    return sum(getattr(event, field) for event in profiler.key_averages()) / 10
times = {name: device_time(f) for name, f in (("model_new", model_new), ("eager", model), ("compile", compiled))}
print(times)
"""


def run_step(name: str, code: str, arguments: list[str], environment: dict) -> float:
    started = time.monotonic()
    completed = subprocess.run([sys.executable, "-c", code, *arguments], env=environment, capture_output=True,
                               text=True)
    elapsed = time.monotonic() - started
    if completed.returncode != 0:
        raise SystemExit(f"naive flow: the {name} step failed:\n{completed.stdout[-2000:]}\n{completed.stderr[-4000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default=None)
    arguments = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="cuda-agent-naive-")
    try:
        workspace = os.path.join(scratch, "workspace")
        shutil.copytree(arguments.workspace, workspace, ignore=shutil.ignore_patterns("build", ".timing-*", "kernels_*"))
        build = os.path.join(scratch, "build")
        os.makedirs(build)
        environment = dict(os.environ)
        environment.pop("PYTHONPATH", None)
        steps = {
            "rebuild_s": run_step("rebuild", REBUILD, [workspace, build], environment),
            "verify_s": run_step("verify", VERIFY, [workspace, build, arguments.device], environment),
            "profile_s": run_step("profile", PROFILE, [workspace, build, arguments.device], environment),
        }
        steps["total_s"] = sum(steps.values())
        steps["objects"] = len(glob.glob(os.path.join(build, "*.o")))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    text = json.dumps(steps)
    print(text)
    if arguments.out:
        with open(arguments.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

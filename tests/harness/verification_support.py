# SPDX-License-Identifier: Apache-2.0
"""One verification of the harness's own handlers, without the host: the reference and the
candidate handler each run in a process of their own, meeting over a session in a
temporary directory, as the host's workers run them. The candidate's "extension" is a
Python module whose functions compute with torch operators that the test allows inside
forward (``extra_allowed``), so no compiler is needed. Each handler runs in an interpreter
of its own."""

from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import sys

import cuda_agent_harness
from cuda_agent_harness.checks import compare

RELU_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
"""

#: A module-level extension: plain Python functions the candidate's ModelNew calls.
EXTENSION = """
import torch

calls = 0
first_address = None
cache = {}
previous = None


def relu(x):
    return torch.relu(x)


def copy(x):
    return x.clone()


def zeros_like(x):
    return torch.zeros_like(x)


def address(x):
    return x.data_ptr()
"""

MODEL_NEW = """
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.relu(x)
"""

ALLOWED = ("relu", "clamp", "mul", "add", "mean", "sum", "softmax", "_softmax", "div", "where", "gt", "lt", "abs")


#: Runs one handler in a fresh interpreter (a fork of a process whose torch thread pools
#: have started can hang on their locks): argv = harness directory, role, args file, result file.
_RUNNER = """
import json, sys, time, types
sys.path.insert(0, sys.argv[1])
role, arguments, result_path = sys.argv[2], json.load(open(sys.argv[3])), sys.argv[4]
context = types.SimpleNamespace(device=arguments["device"], deadline=time.monotonic() + arguments.pop("timeout"))
try:
    if role == "reference":
        from cuda_agent_harness.verify.reference import reference as handler
    else:
        from cuda_agent_harness.verify.candidate import candidate as handler
    result = handler(arguments, context)
except BaseException as error:
    result = {"crashed": f"{type(error).__name__}: {error}"}
json.dump(result, open(result_path, "w"), default=str)
"""


def _start(role: str, arguments: dict, directory: pathlib.Path, timeout: float) -> subprocess.Popen:
    (directory / f"{role}-args.json").write_text(json.dumps(dict(arguments, timeout=timeout)))
    harness = os.path.dirname(os.path.dirname(os.path.abspath(cuda_agent_harness.__file__)))
    return subprocess.Popen([sys.executable, "-c", _RUNNER, harness, role, str(directory / f"{role}-args.json"),
                             str(directory / f"{role}.json")])


def verify(tmp_path: pathlib.Path, task: str = RELU_TASK, model_new: str = MODEL_NEW, extension: str = EXTENSION, *,
           sets: int = 5, scales: list | None = None, distributions: list | None = None, plan_seed: int | None = 7,
           runs: int = 2, extra_calls: int = 2, tolerance: dict = compare.PAPER, perturb_weights: bool = True,
           extra_allowed=ALLOWED, timeout: float = 120.0, device: str = "cpu") -> tuple[dict, dict]:
    """(the reference's result, the candidate's report) of one verification."""
    tmp_path = pathlib.Path(tmp_path)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "task.py").write_text(task)
    candidate_directory = tmp_path / "candidate"
    candidate_directory.mkdir()
    (candidate_directory / "cuda_extension.py").write_text(extension)
    (candidate_directory / "model_new.py").write_text(model_new)
    session = tmp_path / "session"
    output = session / "out"
    output.mkdir(parents=True)
    for name in ("to_reference", "to_candidate"):
        os.mkfifo(session / name)
    rng = random.Random(plan_seed)
    common = {"reference_path": str(tmp_path / "task.py"), "device": device, "init_seed": rng.randrange(2**32),
              "mode": "eval", "perturb_weights": perturb_weights, "session_directory": str(session),
              "output_directory": str(output)}
    reference_args = dict(common, seeds=[rng.randrange(2**32) for _ in range(sets)],
                          scales=scales or [1.0] * sets, distributions=distributions or [None] * sets, runs=runs,
                          extra_calls=extra_calls, plan_seed=plan_seed, tolerance=tolerance,
                          check_reference_determinism=True, observe_last_call=False)
    candidate_args = dict(common, candidate_directory=str(candidate_directory),
                          policy={"extra_allowed_operations": list(extra_allowed), "observe_device_activity": False})
    processes = {"reference": _start("reference", reference_args, tmp_path, timeout),
                 "candidate": _start("candidate", candidate_args, tmp_path, timeout)}
    results = {}
    for role, process in processes.items():
        try:
            process.wait(timeout + 30)
        finally:
            if process.poll() is None:
                process.kill()
        results[role] = json.loads((tmp_path / f"{role}.json").read_text())
        assert "crashed" not in results[role], results[role]
    return results["reference"], results["candidate"]


def with_forward(body: str) -> str:
    """MODEL_NEW with another body of forward (indented lines)."""
    return MODEL_NEW.replace("        return cuda_extension.relu(x)\n", body)

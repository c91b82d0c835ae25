# SPDX-License-Identifier: Apache-2.0
"""An interleaved timing session: the candidate against eager PyTorch and torch.compile,
each in a process of its own trust level.

Two processes take part:

* the **reference side** (trusted; never imports the candidate) holds the eager model and
  its ``torch.compile`` form, and runs the session: it decides the seeds, the regime, the
  order of contenders in each round, which timed outputs to re-check, and when to stop;
* the **candidate side** (sandboxed) holds ``ModelNew`` and answers the reference side's
  requests over two FIFOs in the session directory; it writes the outputs it hands over
  into the session's output directory.

They take turns on the GPU, never overlapping: in each round the reference side times its
contenders itself and asks the candidate side for its sample, in an order drawn at random
per round, so that clock drift and order effects fall on all contenders alike (the
speedup is computed per round, then over rounds). Every sample uses fresh inputs from the
round's seed, which the candidate learns only when the round starts; the reference side
probes the SM clock after every sample itself, and rounds in which the clock sagged below
the tolerance are flagged. After some rounds chosen in secret (and after the last), the
candidate side must hand over the outputs it just produced under the timer; the reference
side compares them with its own eager outputs of the same round.

Each sample keeps the device busy with a lead while it is enqueued (``contender_timer``), so the
times are the device's, without the host's dispatch; the share of samples the lead
covered is reported per contender (``dispatch_cover``). A request may hold the session to
a time limit (``budget.session_s``): what start-up, compile and calibration leave of it is
shared over the comparisons, which stop when their share ends (``time_budget`` in the
result says where the time went).

Baselines come from the cache (``baseline_cache``) when a fresh entry exists: then the
reference side times eager only, and the speedup against torch.compile goes through the
cached compile/eager ratio (eager anchors the two sessions). Cache entries are measured
by the reference side alone, before the candidate side is allowed to touch the GPU or
after it has gone. An entry whose eager time or clock no longer matches the live session
is stale: torch.compile is then built and timed live.

Run either side with ``python -m cuda_agent_harness.timing.session reference|candidate
--request FILE``; the reference side prints ``RESULT_MARKER`` followed by its JSON result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any, Callable

from ..registry import handler
from .candidate_side import run_candidate_side
from .reference_side import run_reference_side
from .wire import PROTOCOL_VERSION, RESULT_MARKER, create_fifos


def run_locally(request: dict, candidate_request: dict, fork: bool | None = None, fork_reference: bool = False) -> dict:
    """Runs both sides on this machine. The candidate side runs in a child process: forked
    when torch is already imported and CUDA not yet initialized here (as the harness's warm
    workers do), else a fresh interpreter. The reference side runs in this process, or with
    ``fork_reference`` in a forked child too, so that this process never initializes CUDA
    and can run session after session. The candidate side is NOT sandboxed: for trusted
    code, tests and benchmarks, or when this whole process already runs inside a sandbox."""
    import shutil
    import subprocess
    import tempfile

    owned = None
    if not request.get("session"):
        owned = tempfile.mkdtemp(prefix="cuda-agent-timing-")
        request = {**request, "session": owned}
    candidate_request = {**candidate_request, "session": request["session"]}
    create_fifos(request["session"])
    torch_module = sys.modules.get("torch")
    cuda_ready = torch_module is not None and torch_module.cuda.is_initialized()
    if fork is None:
        fork = torch_module is not None and not cuda_ready
    children: list[tuple[int, str]] = []
    child = None
    if fork:
        children.append((_fork(lambda: run_candidate_side(candidate_request).get("ok")), "candidate"))
    else:
        # The folder that holds the package: this file is in its timing/ subpackage.
        harness_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [harness_root, environment.get("PYTHONPATH")]))
        child = subprocess.Popen(
            [sys.executable, "-m", "cuda_agent_harness.timing.session", "candidate", "--request", "-"],
            stdin=subprocess.PIPE, env=environment,
        )
        child.stdin.write(json.dumps(candidate_request).encode())
        child.stdin.close()
    try:
        if fork_reference:
            descriptor, result_path = tempfile.mkstemp(prefix="cuda-agent-timing-result-", suffix=".json")
            os.close(descriptor)

            def reference_side():
                outcome = run_reference_side(request)
                with open(result_path, "w", encoding="utf-8") as handle:
                    json.dump(outcome, handle)
                return True

            pid = _fork(reference_side)
            _wait(pid, float(request.get("deadline_s", 900.0)) + 30.0)
            try:
                with open(result_path, encoding="utf-8") as handle:
                    result = json.load(handle)
            except ValueError:
                result = {"ok": False, "protocol": PROTOCOL_VERSION, "error": "the reference side died without a result"}
            finally:
                os.unlink(result_path)
        else:
            result = run_reference_side(request)
    finally:
        grace = float(request.get("exit_timeout_s", 10.0))
        for pid, _ in children:
            _wait(pid, grace)
        if child is not None:
            try:
                child.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if owned:
            shutil.rmtree(owned, ignore_errors=True)
    return result


def _fork(body: Callable[[], Any]) -> int:
    """Runs ``body`` in a forked child that exits with 0 when it returns something true."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if body() else 1
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def _wait(pid: int, timeout_s: float) -> None:
    """Waits for a forked child, killing it after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished:
            return
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return
        time.sleep(0.02)


@handler("timing_reference", prepared=True, alone=True)
def timing_reference(args: dict, context) -> dict:
    """The reference side of a timing session, in a child of the (trusted) reference
    worker. Args: as ``run_reference_side``; the request's deadline bounds the session."""
    request = dict(args)
    request["deadline_s"] = min(float(request.get("deadline_s", 900.0)), context.seconds_left())
    return run_reference_side(request)


@handler("timing_candidate", prepared=True, alone=True)
def timing_candidate(args: dict, context) -> dict:
    """The candidate side of a timing session, in a child of the (sandboxed) candidate worker."""
    request = dict(args)
    request.setdefault("device", context.device)
    return run_candidate_side(request)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("side", choices=("reference", "candidate"))
    parser.add_argument("--request", required=True, help="JSON request file ('-' for standard input)")
    arguments = parser.parse_args(argv)
    if arguments.request == "-":
        request = json.load(sys.stdin)
    else:
        with open(arguments.request, encoding="utf-8") as handle:
            request = json.load(handle)
    if arguments.side == "reference":
        result = run_reference_side(request)
        if request.get("result_path"):
            temporary = request["result_path"] + ".partial"
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(result, handle)
            os.replace(temporary, request["result_path"])
        sys.stdout.write(RESULT_MARKER + json.dumps(result) + "\n")
        sys.stdout.flush()
        return 0 if result.get("ok") or result.get("rejection") else 1
    status = run_candidate_side(request)
    return 0 if status.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())

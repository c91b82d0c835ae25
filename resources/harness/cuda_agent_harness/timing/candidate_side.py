# SPDX-License-Identifier: Apache-2.0
"""The candidate side of a timing session (sandboxed): it holds ``ModelNew`` under the
forward guard and the integrity checks, answers the reference side's requests for
samples, and hands over the outputs it produced under the timer when asked."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import Callable

from . import arena, trusted_clock
from ..modules import load_module
from .contender_timer import ContenderTimer
from .devices import make_device, warm_graph_machinery
from .input_sets import InputFactory
from .request import _compile_mode, build_reference_model
from .sampling import CaptureFailed
from .wire import Channel, PROTOCOL_VERSION


class CandidateViolation(Exception):
    """The candidate broke the contract while being timed (a rejection reason and a message)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class CandidateChecks:
    """The verifier's checks, applied around the candidate while it is timed: process-wide
    state it must leave alone (integrity.py), threads and processes it must not leave
    running (checks/hygiene.py), and what may run inside forward (checks/guard.py). The state is taken
    before the candidate is imported, after torch's own pools, modes and graph machinery
    have started. Trusted "candidates" (the reference itself, for A/A measurements) run
    unchecked."""

    def __init__(self, torch, device, enabled: bool, policy: dict):
        self.enabled = enabled
        self.policy = policy
        if not enabled:
            return
        from ..checks import guard, hygiene, integrity

        self.guard_module, self.hygiene = guard, hygiene
        hygiene.warm_thread_pools(device.kind)
        with torch.no_grad(), guard.ForwardGuard():
            torch.empty(1, device=device.torch_device)
        warm_graph_machinery(torch, device)
        self.integrity = integrity.Integrity()
        self.threads = hygiene.os_threads()

    def guarded(self, function: Callable) -> Callable:
        """``function`` under the forward guard; a refused operation ends the session even
        if the candidate caught the exception."""
        if not self.enabled:
            return function
        return GuardedCall(function, self.guard_module.ForwardGuard,
                           tuple(self.policy.get("extra_allowed_operations", ())))

    def violation(self) -> tuple[str, str] | None:
        if not self.enabled:
            return None
        problems = self.integrity.violations()
        if problems:
            return "global_state_modified", (
                "while being timed the candidate changed process-wide state: " + "; ".join(problems[:6])
            )
        started = {tid: name for tid, name in self.hygiene.os_threads().items() if tid not in self.threads}
        if started:
            names = ", ".join(f"'{name}'" for name in list(started.values())[:5])
            return "work_outlived_call", f"the candidate left {len(started)} thread(s) running ({names})"
        children = self.hygiene.child_processes()
        if children:
            return "work_outlived_call", f"the candidate left {len(children)} process(es) running"
        return None


class GuardedCall:
    """A function under the forward guard, one guard per call. While ``serving(allocations)``
    is active, the guard serves allowed creation operators from ``allocations`` (a trusted
    batch's arena) instead of torch's allocator."""

    def __init__(self, function: Callable, guard_class, extra_allowed: tuple):
        self.function = function
        self.guard_class = guard_class
        self.extra_allowed = extra_allowed
        self.allocations = None

    @contextlib.contextmanager
    def serving(self, allocations):
        self.allocations = allocations
        try:
            yield
        finally:
            self.allocations = None

    def __call__(self, *inputs):
        guard = self.guard_class(extra_allowed=self.extra_allowed, allocations=self.allocations)
        try:
            with guard:
                outputs = self.function(*inputs)
        except BaseException:
            violation = self.refused(guard)
            if violation is not None:
                raise violation from None
            raise
        violation = self.refused(guard)
        if violation is not None:
            raise violation
        return outputs

    @staticmethod
    def refused(guard) -> "CandidateViolation | None":
        violation = guard.first_violation()
        if violation is None:
            return None
        shown = violation.get("called_as") or violation["operation"]
        return CandidateViolation("forbidden_operation",
                                  f"ModelNew.forward ran {shown} while being timed: {violation['why']}")


def _candidate_function(request: dict, reference, torch, device, init_seed: int):
    """The callable timed as "candidate": ModelNew normally; for A/A measurements the
    reference model itself ("reference") or its torch.compile form ("compile")."""
    kind = request.get("candidate_kind", "model_new")
    reference_model = build_reference_model(torch, reference, init_seed, device, request.get("weight_gains"))
    if kind == "reference":
        return reference_model
    if kind == "compile":
        settings = request.get("compile", {})
        return torch.compile(reference_model, mode=_compile_mode(settings), backend=settings.get("backend", "inductor"))
    if kind != "model_new":
        raise ValueError(f"unknown candidate_kind {kind!r}")
    # The weights are built: the candidate's code must not find the reference Model here and
    # run it, so the reference module keeps only what builds inputs.
    from ..models import keep_inputs_only  # torch is imported by now

    keep_inputs_only(reference)
    for directory in (request.get("build_directory"), request.get("candidate_directory")):
        if directory and directory not in sys.path:
            sys.path.insert(0, directory)
    candidate = load_module(os.path.join(request["candidate_directory"], "model_new.py"), "model_new")
    torch.manual_seed(init_seed)
    model = candidate.ModelNew(*reference.get_init_inputs())
    model.load_state_dict(reference_model.state_dict())
    del reference_model
    return model.to(device.torch_device).eval()


def run_candidate_side(request: dict) -> dict:
    """Answers the reference side until it says finish. Returns a short status."""
    import torch

    device = make_device(torch, request.get("device", "cuda"), request.get("device_index", 0))
    trusted_code = request.get("candidate_kind", "model_new") != "model_new"
    checks = CandidateChecks(torch, device, enabled=not trusted_code, policy=request.get("policy", {}))
    channel = Channel.open(request["session"], "candidate", request.get("connect_timeout_s", 60.0))
    channel.send({"op": "hello", "pid": os.getpid(), "protocol": PROTOCOL_VERSION})
    contender = None
    shared = None
    runner = None
    try:
        while True:
            message = channel.receive(request.get("idle_timeout_s", 600.0))
            op = message.get("op")
            if op == "finish":
                return {"ok": True}
            try:
                if op == "prepare":
                    constants = device.measure_timing_constants()  # harness code only, before the candidate is imported
                    sys.modules.pop("model", None)
                    reference = load_module(request["reference_path"], "model")
                    function = _candidate_function(request, reference, torch, device, int(message["init_seed"]))
                    make_inputs = InputFactory(reference.get_inputs, device)
                    contender = ContenderTimer("candidate", checks.guarded(function), device, make_inputs)
                    seed = int(message["seed"])
                    contender.warm_up(seed, min_seconds=float(message.get("warmup_s", 0.05)))
                    per_call = contender.calibrate(seed, int(message.get("calibration_samples", 5)))
                    size = contender.bytes_per_call(seed)
                    reply = {"op": "prepared", "per_call_us": per_call, "bytes_per_call": size,
                             "timing_constants": constants}
                elif op == "configure":
                    try:
                        contender.configure(message["regime"], int(message["calls"]), int(message["seed"]))
                        reply = {"op": "configured"}
                    except CaptureFailed as error:
                        reply = {"op": "capture_failed", "message": str(error)}
                elif op == "sample":
                    sample = contender.sample(int(message["seed"]))
                    reply = {"op": "sample", **sample.to_json()}
                elif op == "sample_outputs":
                    reply = {"op": "sample_outputs",
                             "outputs": contender.gathered_outputs(int(message["call"]), list(message["positions"])),
                             "written_last_by": contender.written_last_by(int(message["call"]))}
                elif op == "trusted_arena":
                    # Answered first: the trusted side hands the arena over once it knows we are coming.
                    channel.send({"op": "trusted_arena_waiting"})
                    shared = arena.receive_arena(torch, device.kind, str(message["socket"]),
                                                 getattr(device, "index", 0), float(request.get("connect_timeout_s", 60.0)))
                    continue
                elif op == "trusted_setup":
                    if shared is None:
                        raise RuntimeError("trusted batches were set up before the arena was handed over")
                    layout = trusted_clock.Layout.from_json(message["layout"])
                    sizes = {int(spec["nbytes"]) for spec in message["outputs"]}
                    runner = trusted_clock.TrustedBatchRunner(
                        torch, device, contender.function, shared, layout, contender.make_inputs(0), sizes,
                        serve_allocations=request.get("candidate_kind", "model_new") != "compile")
                    reply = {"op": "trusted_ready", **runner.prepare()}
                elif op == "status":
                    reply = {"op": "status"}
                elif op == "trusted_batch":
                    # Answered at once: the checks below run after the trusted side's clock stops.
                    channel.send({"op": "trusted_done", **runner.run()})
                    problem = checks.violation()
                    if problem:
                        channel.send({"op": "error", "reason": problem[0], "message": problem[1]})
                        return {"ok": False, "error": problem[1]}
                    continue
                else:
                    reply = {"op": "error", "reason": "harness_error", "message": f"unknown request {op!r}"}
            except (CandidateViolation, trusted_clock.TrustedClockError) as violation:
                channel.send({"op": "error", "reason": violation.reason, "message": str(violation)})
                return {"ok": False, "error": str(violation)}
            except Exception as error:
                reason = "load_error" if op == "prepare" else "crashed"
                channel.send(
                    {
                        "op": "error",
                        "reason": reason,
                        "message": f"{type(error).__name__}: {error}",
                        "traceback": traceback.format_exc()[-4000:],
                    }
                )
                return {"ok": False, "error": str(error)}
            problem = checks.violation()
            if problem:
                channel.send({"op": "error", "reason": problem[0], "message": problem[1]})
                return {"ok": False, "error": problem[1]}
            channel.send(reply)
    finally:
        if shared is not None:
            runner = None
            shared.close()
        channel.close()

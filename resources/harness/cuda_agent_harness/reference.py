# SPDX-License-Identifier: Apache-2.0
"""The ``reference`` handler: the trusted side of a verification.

It runs the task's ``Model`` on every input set, keeps the expected outputs in its own
memory, and then judges the candidate's outputs as they arrive over the session: it reads
them as raw bytes from the candidate's slot files and compares them here. This process
never imports candidate code, and its sandbox cannot read the candidate's files (only the
slots the candidate writes)."""

from __future__ import annotations

import os
import time

import torch

from . import compare, models, tensorio
from .compare import Failure
from .registry import handler
from .session import Session, SessionClosed, SessionTimeout


class Expected:
    """What the reference produced for one input set."""

    def __init__(self, outputs, inputs_before, inputs_after, fingerprint: str):
        layout: list = []
        self.description = tensorio.describe(outputs, layout)
        self.tensors = [tensor for _, tensor in layout]
        self.leaves = _tensor_paths(self.description)
        self.fingerprint = fingerprint
        self.mutated = [index for index, (before, after) in enumerate(zip(inputs_before, inputs_after))
                        if isinstance(before, torch.Tensor) and not torch.equal(before, after)]
        self.inputs_after = {index: inputs_after[index] for index in self.mutated}


def _tensor_paths(description: dict, path: list | None = None) -> list[list]:
    path = [] if path is None else path
    if description["kind"] == "tensor":
        return [path]
    if description["kind"] == "sequence":
        found = []
        for index, item in enumerate(description["items"]):
            found += _tensor_paths(item, path + [index])
        return found
    return []


def _at(description: dict, path: list) -> dict:
    for index in path:
        description = description["items"][index]
    return description


def _clone_inputs(inputs: list) -> list:
    return [value.clone() if isinstance(value, torch.Tensor) else value for value in inputs]


def run_reference_sets(module, model, args: dict, device: str) -> list[Expected]:
    expected = []
    for index, seed in enumerate(args["seeds"]):
        scale = float(args.get("scales", [1.0] * len(args["seeds"]))[index])
        inputs = models.generate_inputs(module, int(seed), scale, device)
        pristine = _clone_inputs(inputs)
        working = _clone_inputs(inputs)
        with torch.no_grad():
            try:
                outputs = model(*working)
            except Exception as error:
                raise models.TaskError(f"the reference Model failed on input set {index}: "
                                       f"{type(error).__name__}: {error}") from error
        if device == "cuda":
            torch.cuda.synchronize()
        entry = Expected(outputs, pristine, working, models.fingerprint(pristine))
        if index == 0 and args.get("check_reference_determinism", True):
            again = _clone_inputs(pristine)
            with torch.no_grad():
                repeat = model(*again)
            layout: list = []
            tensorio.describe(repeat, layout)
            for path, (_, tensor) in zip(entry.leaves, layout):
                try:
                    compare.compare_tensor(entry.tensors[entry.leaves.index(path)], tensor,
                                           compare.tolerance_for(args["tolerance"], tensor.dtype), compare.label(path))
                except Failure as failure:
                    raise models.TaskError("the reference Model is not deterministic: two runs on the same inputs"
                                           f" differ ({failure.message}); this task cannot be verified") from None
        expected.append(entry)
    return expected


class Judge:
    """Compares what the candidate announces with the expected outputs."""

    def __init__(self, expected: list[Expected], args: dict):
        self.expected = expected
        self.tolerance = args["tolerance"]
        self.output_directory = args["output_directory"]
        self.runs = int(args.get("runs", 2))
        self.checks: list[dict] = []
        self.passed_first_run: set[int] = set()
        # Each output read is compared (synchronously) before the next read reuses it.
        self.scratch = tensorio.ScratchBuffer(pinned=any(t.is_cuda for entry in expected for t in entry.tensors))
        #: Where judging goes, beside the waiting for the candidate: reading the slot files,
        #: and comparing (moving to the device included).
        self.timings_ms = {"read_ms": 0.0, "compare_ms": 0.0}

    def _read_and_compare(self, path: str, entry: dict, want, where: str) -> dict:
        mark = time.perf_counter()
        actual = tensorio.read_tensor(path, entry, self.scratch)
        read = time.perf_counter()
        stats = compare.compare_tensor(want, actual, compare.tolerance_for(self.tolerance, want.dtype), where)
        self.timings_ms["read_ms"] += (read - mark) * 1000
        self.timings_ms["compare_ms"] += (time.perf_counter() - read) * 1000
        return stats

    def check(self, message: dict, set_index: int, run: int) -> None:
        if message.get("set") != set_index or message.get("run") != run:
            raise Failure("harness_error", f"the candidate process announced outputs out of order (expected input set"
                                           f" {set_index}, run {run + 1})")
        slot = message.get("slot")
        if not isinstance(slot, str) or "/" in slot or slot.startswith("."):
            raise Failure("harness_error", "the candidate process named an invalid slot file")
        path = os.path.join(self.output_directory, slot)
        expected = self.expected[set_index]
        if message.get("input_fingerprint") != expected.fingerprint:
            raise models.TaskError(
                f"input set {set_index} differs between the reference and the candidate process; the task's"
                " get_inputs() must depend only on torch's and Python's random generators so that a seed reproduces it")
        try:
            description = tensorio.validate(message.get("outputs"))
            compare.compare_structure(expected.description, description)
            stats = []
            for path_in_output, tensor in zip(expected.leaves, expected.tensors):
                stats.append(self._read_and_compare(path, _at(description, path_in_output), tensor,
                                                    compare.label(path_in_output)))
            returned_inputs = message.get("inputs") or {}
            for index in expected.mutated:
                where = f"input {index} after the call (the reference changes it in place)"
                entry = returned_inputs.get(str(index))
                if entry is None:
                    raise Failure("value_mismatch", f"{where} was not returned by the candidate process")
                entry = tensorio.validate(entry)
                want = expected.inputs_after[index]
                if list(entry.get("shape", [])) != list(want.shape) or entry.get("dtype") != tensorio.dtype_name(want.dtype):
                    raise Failure("value_mismatch", f"{where} changed shape or dtype")
                stats.append(self._read_and_compare(path, entry, want, where))
        except tensorio.DescriptionError as error:
            raise Failure("output_structure", f"the candidate's output could not be read: {error}") from None
        except Failure as failure:
            if run > 0 and set_index in self.passed_first_run and failure.reason in ("value_mismatch", "non_finite"):
                raise Failure("nondeterministic",
                              f"run {run + 1} on input set {set_index} differs from the reference although run 1 on the"
                              f" same inputs matched: {failure.message} Outputs must not depend on uninitialised"
                              " memory, races between threads or blocks, or earlier calls.",
                              dict(failure.details, first_reason=failure.reason)) from None
            failure.details.setdefault("input_set", set_index)
            failure.details.setdefault("run", run + 1)
            if not failure.message.startswith("On input set"):
                failure.message = f"On input set {set_index} (run {run + 1}): {failure.message}"
            raise
        if run == 0:
            self.passed_first_run.add(set_index)
        self.checks.append({"set": set_index, "run": run + 1, "passed": True, "errors": stats})


class CandidateAborted(Exception):
    """The candidate process stopped on its own (it reports why to the host)."""


def _receive(session: Session, expected_type: str) -> dict:
    message = session.receive()
    if message.get("type") == "abort":
        raise CandidateAborted()
    if message.get("type") != expected_type:
        raise Failure("harness_error", f"the candidate process sent a {message.get('type')!r} message where"
                                       f" {expected_type!r} was due")
    return message


@handler("reference", prepared=True)
def reference(args: dict, context) -> dict:
    """Args: reference_path, device, init_seed, seeds, scales, runs, mode, perturb_normalization,
    tolerance, session_directory, output_directory, check_reference_determinism."""
    timings = {}
    started = time.monotonic()
    device = args.get("device", context.device)
    session = Session(args["session_directory"], "reference", context.deadline)
    timings["session_open_ms"] = (time.monotonic() - started) * 1000
    mark = time.monotonic()
    models.setup_device(device)
    module = models.load_reference(args["reference_path"])
    model, _ = models.build_reference_model(module, int(args["init_seed"]), device, args.get("mode", "eval"),
                                            bool(args.get("perturb_normalization", True)))
    state = model.state_dict()
    weights = models.state_fingerprint(state)
    expected = run_reference_sets(module, model, args, device)
    timings["reference_ms"] = (time.monotonic() - mark) * 1000
    judge = Judge(expected, args)
    verdict = {"correct": False, "reason": "crashed",
               "message": "the candidate process ended before it sent its outputs"}
    candidate_stage = "start"
    try:
        message = _receive(session, "constructed")
        if message.get("weights_fingerprint") != weights:
            raise models.TaskError("the reference weights differ between the reference and the candidate process;"
                                   " Model's construction must depend only on torch's random generator")
        candidate_stage = "constructed"
        session.send({"type": "plan", "seeds": args["seeds"], "scales": args.get("scales"), "runs": judge.runs,
                      "return_inputs": [entry.mutated for entry in expected]})
        mark = time.monotonic()
        for set_index in range(len(expected)):
            for run in range(judge.runs):
                message = _receive(session, "outputs")
                candidate_stage = f"set {set_index} run {run + 1}"
                try:
                    judge.check(message, set_index, run)
                except Failure:
                    session.send({"type": "stop"})
                    raise
                session.send({"type": "continue"})
        timings["judging_ms"] = (time.monotonic() - mark) * 1000
        timings.update(judge.timings_ms)
        verdict = {"correct": True, "reason": None, "message": "every output matched the reference"}
    except Failure as failure:
        verdict = {"correct": False, **failure.as_dict()}
    except CandidateAborted:
        verdict = {"correct": False, "reason": "candidate_reported", "message": "the candidate process stopped"}
    except SessionClosed:
        pass
    except SessionTimeout:
        verdict = {"correct": False, "reason": "timeout", "message": "the candidate did not answer in time"}
    finally:
        session.close()
    first = expected[0]
    return {
        "verdict": verdict,
        "checks": judge.checks,
        "candidate_stage": candidate_stage,
        "expected": {"outputs": first.description, "mutated_inputs": first.mutated},
        "input_sets": len(expected),
        "runs": judge.runs,
        "timings_ms": timings,
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
    }

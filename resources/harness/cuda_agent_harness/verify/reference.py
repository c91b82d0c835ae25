# SPDX-License-Identifier: Apache-2.0
"""The ``reference`` handler: the trusted side of a verification.

It runs the task's ``Model`` on every input set, keeps the expected outputs in its own
memory, draws the verification's plan (``plans.py``: how many calls each set gets, in which
order, where the inputs lie) and hands it to the candidate one call at a time, and judges
the candidate's outputs as they arrive over the session: it reads them as raw bytes from
the candidate's slot files and compares them here, with atol scaled to each output's
magnitude. A first call on a set that gives wrong values is repeated on the same inputs,
so that a result depending on more than its inputs is reported as such. Where the task's
constructor takes floating-point numbers that its output depends on, a last call goes to
models built with other values of them (``ConstantsPass``). This process never imports
candidate code, and its sandbox cannot read the candidate's files (only the slots the
candidate writes)."""

from __future__ import annotations

import os
import random
import secrets
import time

import torch

from ..checks import compare
from .. import models, tensorio
from . import plans
from ..checks.compare import Failure
from ..registry import handler
from .session import Session, SessionClosed, SessionTimeout


class Expected:
    """What the reference produced for one input set."""

    def __init__(self, outputs, inputs_before, inputs_after, fingerprint: str, tolerance: dict):
        layout: list = []
        self.description = tensorio.describe(outputs, layout)
        self.tensors = [tensor for _, tensor in layout]
        self.leaves = _tensor_paths(self.description)
        self.fingerprint = fingerprint
        self.input_count = len(inputs_before)
        self.input_bytes = _bytes_of(inputs_before)
        self.mutated = [index for index, (before, after) in enumerate(zip(inputs_before, inputs_after))
                        if isinstance(before, torch.Tensor) and not torch.equal(before, after)]
        self.inputs_after = {index: inputs_after[index] for index in self.mutated}
        #: Each output's (and each changed input's) tolerance, its atol scaled to its magnitude.
        self.tolerances = [compare.effective_tolerance(tolerance, tensor) for tensor in self.tensors]
        self.input_tolerances = {index: compare.effective_tolerance(tolerance, tensor)
                                 for index, tensor in self.inputs_after.items()}
        #: Where comparisons run: the task's device, also once ``offload`` moved the
        #: expected values into host memory.
        self.compute_device = self.tensors[0].device if self.tensors else torch.device("cpu")

    def held_bytes(self) -> int:
        """The bytes of the expected outputs and changed inputs."""
        return _bytes_of(self.tensors) + _bytes_of(self.inputs_after.values())

    def offload(self) -> None:
        """Moves the expected values into host memory; they are compared on the device a
        chunk at a time (``compare.compare_tensor``)."""
        self.tensors = [tensor.cpu() for tensor in self.tensors]
        self.inputs_after = {index: tensor.cpu() for index, tensor in self.inputs_after.items()}

    def on_host(self) -> bool:
        return self.compute_device.type != "cpu" and all(not tensor.is_cuda for tensor in self.tensors)

    def mismatch(self, outputs) -> Failure | None:
        """The first output of ``outputs`` (another run's) outside its tolerance, or None."""
        layout: list = []
        tensorio.describe(outputs, layout)
        for position, (path, (_, tensor)) in enumerate(zip(self.leaves, layout)):
            try:
                compare.compare_tensor(self.tensors[position], tensor, self.tolerances[position], compare.label(path),
                                       device=self.compute_device)
            except Failure as failure:
                return failure
        return None


def _bytes_of(values) -> int:
    """The bytes the tensors among ``values`` hold."""
    return sum(value.numel() * value.element_size() for value in values if isinstance(value, torch.Tensor))


def footprint(state: dict, expected: list, device: str, held_device_bytes: int = 0) -> dict:
    """What the reference held: its parameters and buffers, the first set's inputs and
    outputs, on a GPU the peak of device memory its process allocated, what it held on the
    device while the candidate was judged (``held_device_bytes``: the expected outputs,
    unless they were kept in host memory, "expected_on_host") and the device's size. The
    pool admits verifications of the task beside others by it; the host tells from it
    whether the candidate ran out of memory the evaluation itself took."""
    first = expected[0]
    result = {
        "parameter_bytes": _bytes_of(state.values()),
        "input_bytes": first.input_bytes,
        "output_bytes": _bytes_of(first.tensors),
        "peak_device_bytes": int(torch.cuda.max_memory_allocated()) if device == "cuda" else 0,
        "held_device_bytes": held_device_bytes,
        "expected_on_host": any(entry.on_host() for entry in expected),
    }
    if device == "cuda":
        result["device_total_bytes"] = int(torch.cuda.mem_get_info()[1])
    return result


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


#: The expected values of all input sets are kept in host memory where they would take more
#: than this share of the device: the candidate's process needs the rest for its inputs,
#: outputs and poisoned free memory (19_ReLU, 6 GB a set, held 43 GB of an 80 GB H100 in
#: expected outputs, and a correct candidate's first output did not fit).
EXPECTED_DEVICE_SHARE = 1 / 8


def _keep_expected_on_host(entry: Expected, sets: int, device: str) -> bool:
    """Whether the expected values of ``sets`` sets like ``entry`` exceed
    EXPECTED_DEVICE_SHARE of the device."""
    if device != "cuda":
        return False
    return entry.held_bytes() * sets > torch.cuda.mem_get_info()[1] * EXPECTED_DEVICE_SHARE


#: A verification adds a near repeat of its first input set when that set's inputs take at
#: most this many bytes (one more set of inputs and outputs is held on the device).
NEAR_REPEAT_MAX_BYTES = 512 << 20


def set_specs(args: dict, near_repeat: bool = False) -> list[tuple[int, float, dict | None]]:
    """(seed, scale, distribution) of every input set of a request; with ``near_repeat``
    (and the request's ``near_repeat`` not false), one more set at the end: the first set's
    inputs with a few elements moved (``models.near_repeat_inputs``)."""
    seeds = [int(seed) for seed in args["seeds"]]
    scales = [float(scale) for scale in (args.get("scales") or [1.0] * len(seeds))]
    distributions = list(args.get("distributions") or [None] * len(seeds))
    if len(scales) != len(seeds) or len(distributions) != len(seeds):
        raise models.TaskError("the request gives seeds, scales and distributions of different lengths")
    specs = [(seed, scale, models.check_distribution(spec)) for seed, scale, spec in zip(seeds, scales, distributions)]
    if near_repeat and specs and args.get("near_repeat", True):
        seed, scale, distribution = specs[0]
        specs.append((models._derived_seed("near-repeat", *seeds) & 0xFFFFFFFF, 1.0,
                      {"kind": models.NEAR_REPEAT, "base": [seed, scale, distribution]}))
    return specs


def describe_set(index: int, spec: tuple) -> str:
    _, scale, distribution = spec
    text = f"input set {index} ({models.describe_distribution(distribution)}"
    return text + (f", scaled by {scale:g})" if scale != 1.0 else ")")


def run_reference_sets(module, model, args: dict, device: str, specs: list | None = None) -> list[Expected]:
    """The expected outputs of every set of ``specs`` (default: the request's sets), in host
    memory where they are large (``_keep_expected_on_host``). A near repeat whose inputs
    would exceed NEAR_REPEAT_MAX_BYTES is dropped from ``specs``."""
    expected = []
    on_host = False
    specs = set_specs(args) if specs is None else specs
    first_set_bytes = 0
    for index, (seed, scale, distribution) in enumerate(list(specs)):
        # A near repeat is as large as the first set: decided before its inputs are built.
        if distribution is not None and distribution["kind"] == models.NEAR_REPEAT and \
                first_set_bytes > NEAR_REPEAT_MAX_BYTES:
            del specs[index:]
            break
        inputs = models.generate_inputs(module, seed, scale, device, distribution)
        if index == 0:
            first_set_bytes = sum(value.numel() * value.element_size() for value in inputs
                                  if isinstance(value, torch.Tensor))
        # ``inputs`` stay as generated: only ``working`` goes to the model.
        working = _clone_inputs(inputs)
        with torch.no_grad():
            try:
                outputs = model(*working)
            except Exception as error:
                raise models.TaskError(f"the reference Model failed on input set {index}: "
                                       f"{type(error).__name__}: {error}") from error
        if device == "cuda":
            torch.cuda.synchronize()
        entry = Expected(outputs, inputs, working, models.fingerprint(inputs), args["tolerance"])
        del outputs, working
        if index == 0 and args.get("check_reference_determinism", True):
            again = _clone_inputs(inputs)
            with torch.no_grad():
                failure = entry.mismatch(model(*again))
            del again
            if failure:
                raise models.TaskError("the reference Model is not deterministic: two runs on the same inputs"
                                       f" differ ({failure.message}); this task cannot be verified")
        del inputs
        if index == 0:
            # The constructor-constants pass may add one more set like the first.
            on_host = _keep_expected_on_host(entry, len(specs) + 1, device)
        if on_host:
            entry.offload()
        expected.append(entry)
    return expected


class ConstantsPass:
    """The verification's last call: Model and ModelNew both built from get_init_inputs()
    with its floating-point numbers changed (``models.changed_constants``), called on the
    inputs of the first set. A kernel that hard-codes such a number (a divisor written as
    ``* 0.5f``) instead of using the value ModelNew receives is right for get_init_inputs()
    alone, and no input set shows it: every set is computed by models built from the same
    arguments."""

    def __init__(self, changes: list[dict], expected: Expected, weights: str):
        self.changes = changes
        self.expected = expected
        #: The fingerprint of the weights the changed Model holds (the candidate's process
        #: builds the same and loads them into its second ModelNew).
        self.weights = weights

    def describe(self) -> str:
        """'get_init_inputs()[2] (divisor) = 1.4 instead of 2.0'."""
        return ", ".join(f"get_init_inputs()[{change['position']}]"
                         + (f" ({change['name']})" if change.get("name") else "")
                         + f" = {change['changed']!r} instead of {change['original']!r}" for change in self.changes)

    def advice(self) -> str:
        """What a rejection on the call tells the candidate to do."""
        name = next((change["name"] for change in self.changes if change.get("name")), "scale")
        return (" Every earlier call on this input set matched, with get_init_inputs()'s own arguments: ModelNew"
                " computes with the numbers of get_init_inputs() rather than the values its constructor receives."
                f" Keep what __init__ is given (self.{name} = {name}) and pass it to the kernels at each call (or a"
                f" value computed from it on the host, such as 1.0 / {name}); do not write such constants into the"
                " kernels.")


def _non_finite_outputs(entry: Expected) -> set[int]:
    return {position for position, tensor in enumerate(entry.tensors) if not compare.nonfinite_free(tensor)}


def constants_pass(module, args: dict, device: str, arguments: list, state: dict, spec: tuple,
                   baseline: Expected) -> ConstantsPass | None:
    """The expected outputs of the reference built with changed constructor numbers on the
    input set of ``spec`` (the first), whose outputs with the task's own arguments are
    ``baseline``; None where no such call can tell anything: no floating-point number among
    the arguments, a Model that refuses the other values, fails on them, or gives outputs of
    other shapes (the number is a size) or non-finite values where it gave none, or outputs
    that stay within the tolerance of ``baseline`` (the output does not depend on the
    numbers: an epsilon, a dropout probability in eval mode)."""
    built = models.build_with_changed_constants(module, int(args["init_seed"]), device, args.get("mode", "eval"),
                                                bool(args.get("perturb_weights", True)), args.get("weight_gains"),
                                                arguments, state)
    if built is None:
        return None
    model, _, changes = built
    seed, scale, distribution = spec
    inputs = models.generate_inputs(module, seed, scale, device, distribution)
    working = _clone_inputs(inputs)
    try:
        with torch.no_grad():
            outputs = model(*working)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception:
        return None
    entry = Expected(outputs, inputs, working, models.fingerprint(inputs), args["tolerance"])
    del inputs, working
    try:
        compare.compare_structure(baseline.description, entry.description)
        depends = baseline.mismatch(outputs) is not None
    except Failure as failure:
        if failure.reason != "value_mismatch":  # another shape or type: the number is a size
            return None
        depends = True  # a number the reference returns changed with them
    if not depends or entry.mutated != baseline.mutated or _non_finite_outputs(entry) - _non_finite_outputs(baseline):
        return None
    weights = models.state_fingerprint(model.state_dict())
    names = models.signature_parameters(module.Model)
    for change in changes:
        change["name"] = names[change["position"]] if change["position"] < len(names) else None
    if baseline.on_host():
        entry.offload()
    return ConstantsPass(changes, entry, weights)


def _ordinal(number: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(number, f"{number}th")


class Judge:
    """Compares what the candidate announces with the expected outputs, call by call."""

    def __init__(self, expected: list[Expected], args: dict, specs: list | None = None,
                 constants: ConstantsPass | None = None):
        self.expected = expected
        self.specs = set_specs(args) if specs is None else specs
        #: The last call's expectations, on models built with other constructor numbers.
        self.constants = constants
        self.output_directory = args["output_directory"]
        self.checks: list[dict] = []
        #: Input set -> the first call on it that matched.
        self.matched: dict[int, int] = {}
        # Each output read is compared (synchronously) before the next read reuses it.
        #: Where outputs are compared: the task's device, wherever the expected values lie.
        self.device = expected[0].compute_device if expected else None
        self.scratch = tensorio.ScratchBuffer(pinned=self.device is not None and self.device.type == "cuda")
        #: Where judging goes, beside the waiting for the candidate: reading the slot files,
        #: and comparing (moving to the device included).
        self.timings_ms = {"read_ms": 0.0, "compare_ms": 0.0}

    def where(self, step: dict) -> str:
        """'call 4 (input set 2, its 2nd call, in fresh memory)'."""
        if step.get("constants"):
            return (f"call {step['call'] + 1} ({describe_set(step['set'], self.specs[step['set']])}, on Model and"
                    f" ModelNew constructed with {self.constants.describe()}, inputs"
                    f" {plans.describe_placement(step['placement'])})")
        return (f"call {step['call'] + 1} ({describe_set(step['set'], self.specs[step['set']])}, its"
                f" {_ordinal(step['run'])} call, inputs {plans.describe_placement(step['placement'])})")

    def _read_and_compare(self, path: str, entry: dict, want, tolerance: dict, where: str, written_before: bool) -> dict:
        mark = time.perf_counter()
        actual = tensorio.read_tensor(path, entry, self.scratch)
        read = time.perf_counter()
        stats = compare.compare_tensor(want, actual, tolerance, where, written_before, device=self.device)
        self.timings_ms["read_ms"] += (read - mark) * 1000
        self.timings_ms["compare_ms"] += (time.perf_counter() - read) * 1000
        return stats

    def check(self, message: dict, step: dict) -> None:
        """Judges the outputs of ``step``; raises Failure if they are wrong."""
        if message.get("call") != step["call"]:
            raise Failure("harness_error", f"the candidate process announced the outputs of call {message.get('call')!r}"
                                           f" where call {step['call'] + 1} was due")
        slot = message.get("slot")
        if not isinstance(slot, str) or "/" in slot or slot.startswith("."):
            raise Failure("harness_error", "the candidate process named an invalid slot file")
        path = os.path.join(self.output_directory, slot)
        set_index = step["set"]
        constants = bool(step.get("constants"))
        expected = self.constants.expected if constants else self.expected[set_index]
        if message.get("input_fingerprint") != expected.fingerprint:
            raise models.TaskError(
                f"input set {set_index} differs between the reference and the candidate process; the task's"
                " get_inputs() must depend only on torch's and Python's random generators so that a seed reproduces it")
        # The other model's outputs were never written before: its first call.
        written_before = set_index in self.matched and not constants
        where = self.where(step)
        try:
            description = tensorio.validate(message.get("outputs"))
            compare.compare_structure(expected.description, description)
            stats = []
            for position, (path_in_output, tensor) in enumerate(zip(expected.leaves, expected.tensors)):
                stats.append(self._read_and_compare(path, _at(description, path_in_output), tensor,
                                                    expected.tolerances[position], compare.label(path_in_output),
                                                    written_before))
            returned_inputs = message.get("inputs") or {}
            for index in expected.mutated:
                label = f"input {index} after the call (the reference changes it in place)"
                entry = returned_inputs.get(str(index))
                if entry is None:
                    raise Failure("value_mismatch", f"{label} was not returned by the candidate process")
                entry = tensorio.validate(entry)
                want = expected.inputs_after[index]
                if list(entry.get("shape", [])) != list(want.shape) or entry.get("dtype") != tensorio.dtype_name(want.dtype):
                    raise Failure("value_mismatch", f"{label} changed shape or dtype")
                stats.append(self._read_and_compare(path, entry, want, expected.input_tolerances[index], label,
                                                    written_before))
        except tensorio.DescriptionError as error:
            raise Failure("output_structure", f"the candidate's output could not be read: {error}") from None
        except Failure as failure:
            failure.details.setdefault("input_set", set_index)
            failure.details.setdefault("call", step["call"] + 1)
            failure.details.setdefault("placement", step["placement"]["mode"])
            if written_before and failure.reason in ("value_mismatch", "non_finite"):
                earlier = self.matched[set_index]
                raise Failure("nondeterministic",
                              f"On {where}: call {earlier + 1} on the same inputs matched the reference, this one does"
                              f" not: {failure.message} Outputs must depend on the inputs alone, not on earlier calls,"
                              " on where the inputs lie in memory, on uninitialised memory, or on races between"
                              " threads or blocks.",
                              dict(failure.details, first_reason=failure.reason, matched_call=earlier + 1)) from None
            failure.message = f"On {where}: {failure.message}"
            if constants:
                failure.details["constants"] = self.constants.changes
                failure.message += self.constants.advice()
            raise
        if constants:
            self.checks.append({"call": step["call"] + 1, "set": set_index, "run": step["run"],
                                "placement": step["placement"]["mode"], "passed": True, "errors": stats,
                                "constants": self.constants.changes})
            return
        self.matched.setdefault(set_index, step["call"])
        self.checks.append({"call": step["call"] + 1, "set": set_index, "run": step["run"],
                            "placement": step["placement"]["mode"], "passed": True, "errors": stats})


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


def _plan(args: dict, sets: int, inputs: int, constants: bool = False) -> list[dict]:
    """The verification's plan, from the host's plan seed (drawn from the system's entropy
    when the host gives none), with the call on changed constructor arguments last where
    ``constants``. The candidate never sees the seed."""
    plan_seed = args.get("plan_seed")
    rng = random.Random(int(plan_seed) if plan_seed is not None else secrets.randbits(64))
    steps = plans.make_plan(sets, int(args.get("runs", 2)), int(args.get("extra_calls", 2)), inputs, rng)
    if constants:
        steps.append(plans.constants_step(len(steps), inputs, rng))
    return steps


class Verification:
    """The reference's side of the session: hands out the plan one step at a time and
    judges each call's outputs."""

    def __init__(self, session: Session, judge: Judge, steps: list[dict], specs: list[tuple], expected: list[Expected],
                 observe_last: bool):
        self.session = session
        self.judge = judge
        self.steps = steps
        self.specs = specs
        self.expected = expected
        self.observe_last = observe_last
        self.stage = "constructed"

    def _send_step(self, step: dict, observe: bool = False) -> None:
        seed, scale, distribution = self.specs[step["set"]]
        # What the candidate learns: this call's inputs and where to put them, nothing more
        # (and, for the last call of all, that it goes to a ModelNew built with other numbers).
        message = {"type": "call", "call": step["call"], "seed": seed, "scale": scale, "distribution": distribution,
                   "placement": step["placement"], "return_inputs": self.expected[step["set"]].mutated,
                   "observe": observe}
        if step.get("constants"):
            message["constants"] = True
        self.session.send(message)

    def _outputs(self, step: dict) -> dict:
        message = _receive(self.session, "outputs")
        self.stage = f"call {step['call'] + 1}"
        return message

    def run(self) -> None:
        steps = [step for step in self.steps if not step.get("constants")]
        constants_steps = [step for step in self.steps if step.get("constants")]
        last = len(steps) - 1
        # The profiled call is the last of all: its profiler leaves threads behind, which the
        # checks of a call after it would take for the candidate's.
        observe_plan = self.observe_last and not constants_steps
        self._send_step(steps[0], observe=observe_plan and last == 0)
        for index, step in enumerate(steps):
            message = self._outputs(step)
            # The next step goes out before this call is judged: the candidate computes while
            # the reference compares. Reading a step means the slot two calls back was read.
            if index < last:
                self._send_step(steps[index + 1], observe=observe_plan and index + 1 == last)
            try:
                self.judge.check(message, step)
            except Failure as failure:
                self._settle(failure, step, pending=index < last)
        # The call on other constructor arguments goes out only once the plan is judged: the
        # candidate's process then replaces its ModelNew for good.
        for step in constants_steps:
            self._send_step(step, observe=self.observe_last)
            message = self._outputs(step)
            try:
                self.judge.check(message, step)
            except Failure:
                self.session.send({"type": "stop"})
                raise
        self.session.send({"type": "done"})

    def _settle(self, failure: Failure, step: dict, pending: bool) -> None:
        """Ends the session after ``failure`` on ``step``. A first call on an input set that
        produced wrong values is repeated twice on the same inputs in the same buffers (two
        calls apart from it and from each other, so a pattern of every other call shows
        too): if a repeat matches, what failed was not the computation but its dependence on
        something besides the inputs, and the rejection says so."""
        if failure.reason in ("value_mismatch", "non_finite") and step["set"] not in self.judge.matched:
            if pending:
                self._outputs(self.steps[step["call"] + 1])  # the call in flight; its outputs are not needed
            call = step["call"] + (2 if pending else 1)
            repeats = [plans.repeat_step(call, step, 1 if pending else 0)]
            repeats.append(plans.repeat_step(call + 1, repeats[0], 0))
            for repeat in repeats:
                self._send_step(repeat)
                message = self._outputs(repeat)
                self.stage = f"call {step['call'] + 1}"
                try:
                    self.judge.check(message, repeat)
                except Failure:
                    continue
                self.session.send({"type": "stop"})
                raise _depends_on_more_than_inputs(failure, repeat) from None
        self.session.send({"type": "stop"})
        raise failure


def _depends_on_more_than_inputs(failure: Failure, repeat: dict) -> Failure:
    """The rejection of a call whose repeat on the same inputs, in the same buffers, matched."""
    hint = failure.details.get("hint", "")
    message = failure.message[:-len(hint)] if hint and failure.message.endswith(hint) else failure.message
    if failure.details.get("poison"):
        message += (" In that call those elements still held the pattern the harness writes into free memory before"
                    " each call.")
    return Failure("nondeterministic",
                   f"{message} Call {repeat['call'] + 1}, on the same inputs placed in the same buffers, then gave the"
                   " right output: the result depends on something besides the inputs (earlier calls, uninitialised"
                   " memory, or a race between threads or blocks). Outputs must depend on the inputs alone.",
                   dict(failure.details, first_reason=failure.reason, repeat_matched=repeat["call"] + 1))


@handler("reference", prepared=True)
def reference(args: dict, context) -> dict:
    """Args: reference_path, device, init_seed, seeds, scales, distributions, runs (the
    least number of calls per input set), extra_calls, plan_seed, mode, perturb_weights, weight_gains,
    tolerance, session_directory, output_directory, check_reference_determinism,
    observe_last_call."""
    timings = {}
    started = time.monotonic()
    device = args.get("device", context.device)
    session = Session(args["session_directory"], "reference", context.deadline)
    timings["session_open_ms"] = (time.monotonic() - started) * 1000
    mark = time.monotonic()
    models.setup_device(device)
    module = models.load_reference(args["reference_path"])
    model, arguments = models.build_reference_model(module, int(args["init_seed"]), device, args.get("mode", "eval"),
                                                    bool(args.get("perturb_weights", True)), args.get("weight_gains"))
    state = model.state_dict()
    weights = models.state_fingerprint(state)
    specs = set_specs(args, near_repeat=True)
    expected = run_reference_sets(module, model, args, device, specs)
    constants = constants_pass(module, args, device, arguments, state, specs[0], expected[0])
    if device == "cuda":
        # What only running the sets needed (their inputs, the copies that show whether the
        # model changed them) would stay reserved in torch's cache, while the candidate's
        # process, judged next, builds its inputs in what is left: for 19_ReLU (6 GB a
        # tensor) this process held 74 GB of an 80 GB H100 and the candidate's first input
        # did not fit. The expected outputs themselves stay.
        torch.cuda.empty_cache()
    held_device_bytes = int(torch.cuda.memory_reserved()) if device == "cuda" else 0
    timings["reference_ms"] = (time.monotonic() - mark) * 1000
    judge = Judge(expected, args, specs, constants)
    steps = _plan(args, len(expected), max(entry.input_count for entry in expected), constants is not None)
    verification = Verification(session, judge, steps, judge.specs, expected, bool(args.get("observe_last_call", True)))
    verdict = {"correct": False, "reason": "crashed",
               "message": "the candidate process ended before it sent its outputs"}
    candidate_stage = "start"
    try:
        message = _receive(session, "constructed")
        if message.get("weights_fingerprint") != weights:
            raise models.TaskError("the reference weights differ between the reference and the candidate process;"
                                   " Model's construction must depend only on torch's random generator")
        if constants is not None and message.get("constants_fingerprint") != constants.weights:
            raise models.TaskError("the reference built with changed floating-point constructor arguments differs"
                                   " between the reference and the candidate process; Model's construction must"
                                   " depend only on its arguments and torch's random generator")
        candidate_stage = "constructed"
        mark = time.monotonic()
        try:
            verification.run()
        finally:
            candidate_stage = verification.stage
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
        "planned_calls": len(steps),
        "plan": [dict({"set": step["set"], "placement": step["placement"]["mode"]},
                      **({"constants": constants.changes} if step.get("constants") else {})) for step in steps],
        "candidate_stage": candidate_stage,
        "expected": {"outputs": first.description, "mutated_inputs": first.mutated},
        "input_sets": len(expected),
        "runs": int(args.get("runs", 2)),
        "timings_ms": timings,
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "footprint": footprint(state, expected, device, held_device_bytes),
    }

# SPDX-License-Identifier: Apache-2.0
"""The ``candidate`` handler: runs ``ModelNew`` in the sandboxed candidate process.

Order of events, so that the candidate learns nothing it could use too early:
  1. the reference's weights and init inputs are rebuilt here from the init seed (the same
     construction as in the reference process, once more with the changed constructor
     numbers of step 6), torch's thread pools are started, and the state the candidate must
     leave alone is recorded;
  2. the extension and ``model_new.py`` are imported and ``ModelNew`` is built and given
     the reference's weights with a strict ``load_state_dict``;
  3. only then does the reference process hand out the calls of its plan (``plans.py``),
     one at a time, each when it is due: the seed, scale and distribution of the call's
     input set and where its inputs go (fresh memory at an address no earlier call used,
     or the buffers of one of the two calls before), so that the candidate never knows how
     many calls remain or which are checked (all are);
  4. every call runs under the forward guard, into poisoned memory, and is followed by the
     checks that nothing it started outlives it and that ModelNew's own Python state did not
     change (after the first few calls, ``checks/steadiness.py``);
  5. the outputs go into a slot file as raw bytes; the reference process judges them;
  6. where the reference process asks for it after the plan, ModelNew is constructed again
     from get_init_inputs() with its floating-point numbers changed (their weights, too,
     built in step 1), and called once more: a kernel must compute with the values its
     constructor receives.

What this process reports is untrusted: a rejection it reports is believed (a candidate
gains nothing by failing itself), but correctness is decided by the reference process.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

import torch
import torch.nn as nn

from ..checks import hygiene
from .. import models, tensorio
from . import plans
from ..checks.compare import Failure as Rejected
from ..checks.guard import ForbiddenOperation, ForwardGuard
from ..checks.integrity import Integrity
from ..checks.steadiness import StateWatch
from ..modules import load_module
from ..registry import handler
from .session import Session, SessionClosed, SessionTimeout

_type = type
_equal_bits = hygiene.same_bits
_copy = torch.Tensor.copy_
_empty = torch.empty
_narrow = torch.Tensor.narrow
_view = torch.Tensor.view
_set_versions = getattr(torch._C._autograd, "_unsafe_set_version_counter", None)
_data_ptr = torch.Tensor.data_ptr



#: Version counters a verified call's inputs carry, drawn anew for every call.
VERSION_RANGE = 8


def _blur_versions(inputs) -> None:
    """Gives the input tensors of a call version counters drawn at random (0 included): a
    placed input has been written in place and a fresh one has not, and a timed one is fresh
    from get_inputs(), so without this ``x._version`` would tell a forward which calls are
    checked and which are timed."""
    tensors = [value for value in inputs if isinstance(value, torch.Tensor)]
    if not tensors or _set_versions is None:
        return
    draws = os.urandom(len(tensors))
    _set_versions(tuple(tensors), tuple(draw % VERSION_RANGE for draw in draws))

class Stopped(Exception):
    """The reference ended the session (it found a mismatch)."""


def _candidate_traceback(error: BaseException, limit: int = 12) -> str:
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    # The package's root, not this file's folder: frames of every subpackage are the harness's.
    harness = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    kept = [line for line in lines if harness not in line]
    return "".join(kept[-limit:]).strip()


class Counters:
    def __init__(self):
        self.extension_calls = 0
        self.graph_replays = 0
        #: What a forward guard refused while a CUDA graph was being captured.
        self.capture_violations: list[dict] = []


def _count_extension_calls(extension, counters: Counters) -> list[str]:
    wrapped = []
    for name in dir(extension):
        if name.startswith("_"):
            continue
        value = getattr(extension, name)
        if not callable(value) or isinstance(value, type):
            continue

        def counted(*args, __function=value, **kwargs):
            counters.extension_calls += 1
            return __function(*args, **kwargs)

        counted.__name__ = name
        counted.__doc__ = getattr(value, "__doc__", None)
        setattr(extension, name, counted)
        wrapped.append(name)
    return wrapped


def _watch_cuda_graphs(counters: Counters, policy: dict) -> None:
    """Counts graph replays (they launch the candidate's kernels without calling the
    extension) and guards graph captures like forward: a graph replays whatever ran while it
    was captured, so torch compute captured once would otherwise run unseen later."""
    graph_class = getattr(torch.cuda, "CUDAGraph", None)
    if graph_class is None:
        return
    replay_original = graph_class.replay
    begin_original = graph_class.capture_begin
    end_original = graph_class.capture_end
    active: list[ForwardGuard] = []

    def replay(self, *args, **kwargs):
        counters.graph_replays += 1
        return replay_original(self, *args, **kwargs)

    def capture_begin(self, *args, **kwargs):
        result = begin_original(self, *args, **kwargs)
        guard = ForwardGuard(extra_allowed=policy.get("extra_allowed_operations", ()))
        guard.__enter__()
        active.append(guard)
        return result

    def capture_end(self, *args, **kwargs):
        if active:
            guard = active.pop()
            guard.__exit__(None, None, None)
            counters.capture_violations.extend(guard.violations)
        return end_original(self, *args, **kwargs)

    graph_class.replay = replay
    graph_class.capture_begin = capture_begin
    graph_class.capture_end = capture_end


def _check_captures(counters: Counters, when: str) -> None:
    if counters.capture_violations:
        violation = counters.capture_violations[0]
        raise Rejected("forbidden_operation",
                       f"a CUDA graph captured during {when} recorded {violation['called_as'] or violation['operation']}"
                       f" ({violation['operation']}): {violation['why']}. Graphs may capture only the kernels of"
                       " cuda_extension and tensor copies.", {"violation": violation})


def _import_candidate(directory: str, counters: Counters):
    sys.path.insert(0, directory)
    try:
        import cuda_extension  # noqa: F401  (the candidate's own module, built by the compile driver)
    except BaseException as error:
        raise Rejected("load_error", "the extension module cuda_extension failed to import: "
                       f"{type(error).__name__}: {error}", {"traceback": _candidate_traceback(error)}) from None
    extension = sys.modules["cuda_extension"]
    wrapped = _count_extension_calls(extension, counters)
    path = os.path.join(directory, "model_new.py")
    try:
        module = load_module(path, "model_new")
    except BaseException as error:
        raise Rejected("load_error", f"model_new.py failed to import: {type(error).__name__}: {error}",
                       {"traceback": _candidate_traceback(error)}) from None
    return module, wrapped


def _build(module, reference_class: type, init_arguments: list, state: dict, device: str, mode: str):
    model_class = getattr(module, "ModelNew", None)
    if model_class is None or not isinstance(model_class, type) or not issubclass(model_class, nn.Module):
        raise Rejected("interface_mismatch", "model_new.py must define class ModelNew(torch.nn.Module).")
    if issubclass(model_class, reference_class):
        raise Rejected("forbidden_construct", "ModelNew must not inherit from the reference Model.")
    want = models.signature_parameters(reference_class)
    have = models.signature_parameters(model_class)
    if want != have:
        raise Rejected("interface_mismatch",
                       f"ModelNew.__init__ takes ({', '.join(['self'] + have)}) but Model.__init__ takes"
                       f" ({', '.join(['self'] + want)}); ModelNew must have Model's constructor signature and"
                       " parameter names.", {"expected": want, "actual": have})
    return _construct(model_class, init_arguments, state, device, mode)


def _construct(model_class: type, init_arguments: list, state: dict, device: str, mode: str, when: str = ""):
    """ModelNew built from ``init_arguments``, on ``device``, holding ``state``; ``when``
    tells a rejection which construction failed."""
    try:
        model = model_class(*init_arguments)
    except BaseException as error:
        raise Rejected("runtime_error", f"ModelNew(...) raised {type(error).__name__}{when}: {error}",
                       {"traceback": _candidate_traceback(error)}) from None
    try:
        model = model.to(device)
        model.train(mode == "train")
    except BaseException as error:
        raise Rejected("runtime_error", f"moving ModelNew to {device} failed{when}: {type(error).__name__}: {error}",
                       {"traceback": _candidate_traceback(error)}) from None
    _load_weights(model, state)
    return model


def _load_weights(model: nn.Module, state: dict) -> None:
    own = model.state_dict()
    missing = sorted(set(state) - set(own))
    unexpected = sorted(set(own) - set(state))
    shapes = [f"{name}: Model has {tuple(state[name].shape)}, ModelNew has {tuple(own[name].shape)}"
              for name in sorted(set(state) & set(own))
              if isinstance(own[name], torch.Tensor) and tuple(own[name].shape) != tuple(state[name].shape)]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing in ModelNew: {', '.join(missing[:12])}")
        if unexpected:
            parts.append(f"not in Model: {', '.join(unexpected[:12])}")
        if shapes:
            parts.append(f"different shapes: {'; '.join(shapes[:6])}")
        raise Rejected("state_dict_mismatch",
                       "Model's weights do not load into ModelNew with load_state_dict(strict=True): "
                       + "; ".join(parts) + ". Give ModelNew parameters and buffers with the same names and shapes as"
                       " Model's (for example keep the same nn.Module attributes).",
                       {"missing": missing, "unexpected": unexpected, "shapes": shapes})
    try:
        model.load_state_dict(state, strict=True)
    except BaseException as error:
        raise Rejected("state_dict_mismatch", f"load_state_dict(strict=True) failed: {error}") from None


class Baseline:
    """What is running before the candidate runs."""

    def __init__(self):
        self.threads = hygiene.os_threads()
        self.integrity = Integrity()

    def new_threads(self) -> dict[int, str]:
        return {tid: name for tid, name in hygiene.os_threads().items() if tid not in self.threads}


def _check_aftermath(baseline: Baseline, when: str, check_threads: bool) -> None:
    if check_threads:
        threads = baseline.new_threads()
        if threads:
            names = ", ".join(f"{tid} '{name}'" for tid, name in list(threads.items())[:6])
            raise Rejected("work_outlived_call",
                           f"after {when}, {len(threads)} thread(s) it started were still running ({names}). All work"
                           " must be finished when forward returns: no background threads.",
                           {"threads": list(threads.values())})
    children = hygiene.child_processes()
    if children:
        raise Rejected("work_outlived_call",
                       f"after {when}, {len(children)} process(es) it started were still running. Do not start"
                       " processes.", {"processes": len(children)})
    problems = baseline.integrity.violations()
    if problems:
        raise Rejected("global_state_modified",
                       f"{when} changed process-wide state that the evaluation depends on: {'; '.join(problems[:8])}."
                       " Do not replace torch functions, timers or builtins, and do not change torch's global"
                       " settings (cuDNN, TF32, matmul precision, threads, default dtype).", {"changes": problems})


class Placer:
    """Where each call's inputs lie, as the reference's plan says: fresh memory (a new
    allocation, the tensor starting the step's pad into it, at an address no earlier call
    used), or the buffers of the previous call or of the one before it (new contents at an
    address seen already). The buffers of the last two calls are kept for that."""

    def __init__(self, device: str):
        self.device = device
        #: The last two calls' inputs, the latest last.
        self.recent: list[list] = []
        #: Addresses that inputs of earlier calls started at.
        self.used: set[int] = set()

    def _fresh(self, pristine: list, pads: list) -> list:
        placed = []
        for position, value in enumerate(pristine):
            if not isinstance(value, torch.Tensor):
                placed.append(value)
                continue
            steps = int(pads[position]) if position < len(pads) else 0
            while True:
                offset = steps * plans.PAD_STEP_BYTES // value.element_size()
                storage = _empty(value.numel() + offset, dtype=value.dtype, device=value.device)
                tensor = _view(_narrow(storage, 0, offset, value.numel()), value.shape)
                if _data_ptr(tensor) not in self.used or value.numel() == 0:
                    break
                steps += 1
                del storage, tensor
            _copy(tensor, value)
            placed.append(tensor)
        return placed

    def place(self, pristine: list, placement: dict) -> list:
        mode = placement.get("mode")
        back = {plans.PREVIOUS: 1, plans.EARLIER: 2}.get(mode)
        reusable = back is not None and len(self.recent) >= back and _same_layout(self.recent[-back], pristine)
        if reusable:
            placed = []
            for buffer, value in zip(self.recent[-back], pristine):
                if isinstance(buffer, torch.Tensor):
                    _copy(buffer, value)
                placed.append(buffer if isinstance(buffer, torch.Tensor) else value)
        else:
            if len(self.recent) == 2:
                del self.recent[0]  # released first, so that at most two calls' inputs are held
            placed = self._fresh(pristine, placement.get("pads") or [])
        self.recent.append(placed)
        del self.recent[:-2]
        for value in placed:
            if isinstance(value, torch.Tensor):
                self.used.add(_data_ptr(value))
        return list(placed)


def _same_layout(buffers: list, pristine: list) -> bool:
    return len(buffers) == len(pristine) and all(
        isinstance(p, torch.Tensor) == isinstance(b, torch.Tensor) and (
            not isinstance(p, torch.Tensor) or (p.shape == b.shape and p.dtype == b.dtype and p.device == b.device))
        for p, b in zip(pristine, buffers))


class Caller:
    """Calls forward on one input set at a time, with every check around the call."""

    def __init__(self, model, device: str, counters: Counters, baseline: Baseline, policy: dict):
        self.model = model
        self.device = device
        self.counters = counters
        self.baseline = baseline
        self.policy = policy
        self.placer = Placer(device)
        self.poison_sizes: set[int] = set()
        self.device_activity: dict | None = None
        #: Where the calls' time goes, for whoever measures a verification.
        self.timings_ms = {"poison_ms": 0.0, "profiled_call_ms": 0.0}
        #: The host's time in each unprofiled forward so far (µs).
        self.forward_us: list[float] = []

    def gate_us(self) -> float:
        """How long the current stream is held before the profiled call: several times the
        host's longest warm forward so far (the profiler slows launches down), at least 2 ms,
        and at most 200 ms, past which a forward that slow is not held back any further. The
        first forward counts only when it is the only one: it loads the candidate's kernels
        and may capture graphs, which the profiled call, the last, does not."""
        warm = self.forward_us[1:] or self.forward_us
        return min(200_000.0, max(2_000.0, 4 * max(warm, default=0.0)))

    def place(self, pristine: list, placement: dict) -> list:
        """Puts an input set where the step's placement says (see ``Placer``)."""
        inputs = self.placer.place(pristine, placement)
        for value in inputs:
            if isinstance(value, torch.Tensor):
                self.poison_sizes.add(value.numel() * value.element_size())
        return inputs

    def call(self, inputs: list, label: str, profiled: bool):
        mark = time.monotonic()
        hygiene.poison_free_memory(self.device, sorted(self.poison_sizes))
        if self.device == "cuda":
            torch.cuda.synchronize()
        self.timings_ms["poison_ms"] += (time.monotonic() - mark) * 1000
        mark = time.monotonic()
        self.counters.extension_calls = 0
        self.counters.graph_replays = 0
        guard = ForwardGuard(extra_allowed=self.policy.get("extra_allowed_operations", ()))
        _blur_versions(inputs)
        activity = hygiene.DeviceActivity(self.gate_us()) if profiled else None
        outputs = None
        snapshots = None
        tensors: list = []
        try:
            with torch.no_grad():
                if activity is not None:
                    activity.__enter__()
                try:
                    entered = time.perf_counter()
                    with guard:
                        outputs = self.model(*inputs)
                    if activity is not None:
                        activity.mark_return()
                    else:
                        self.forward_us.append((time.perf_counter() - entered) * 1e6)
                    layout: list = []
                    description = tensorio.describe(outputs, layout)
                    tensors = [tensor for _, tensor in layout]
                    if self.device == "cuda":
                        snapshots = hygiene.snapshot_outputs(tensors)
                finally:
                    if activity is not None:
                        activity.__exit__(None, None, None)
                if self.device == "cuda":
                    torch.cuda.synchronize()
        except BaseException as error:
            _check_captures(self.counters, f"ModelNew.forward on {label}")
            violation = guard.first_violation()
            if violation is not None:
                raise self._forbidden(violation, label) from None
            text = f"{type(error).__name__}: {error}"
            reason = "crashed" if "CUDA error" in text or "CUDA kernel errors" in text else "runtime_error"
            raise Rejected(reason, f"ModelNew.forward raised on {label}: {text}",
                           {"traceback": _candidate_traceback(error)}) from None
        _check_captures(self.counters, f"ModelNew.forward on {label}")
        violation = guard.first_violation()
        if violation is not None:
            raise self._forbidden(violation, label)
        _check_aftermath(self.baseline, f"ModelNew.forward on {label}", check_threads=not profiled)
        if snapshots is not None:
            for index, (snapshot, tensor) in enumerate(zip(snapshots, tensors)):
                if not _equal_bits(snapshot, tensor):
                    raise Rejected("work_outlived_call",
                                   f"an output of ModelNew.forward on {label} was still being written after forward"
                                   " returned: work queued on another CUDA stream was not joined back to the current"
                                   " stream. Make the current stream wait for it (an event, or wait_stream) before"
                                   " returning.", {"output": index})
        if activity is not None:
            summary = activity.summary()
            self.timings_ms["profiled_call_ms"] = (time.monotonic() - mark) * 1000
            self.device_activity = summary
            if summary["unordered_kernels"]:
                names = ", ".join(k["name"] for k in summary["unordered_kernels"][:3])
                raise Rejected("work_outlived_call",
                               f"on {label}, kernels on another CUDA stream ({names}) started before the work queued on"
                               " the current stream ahead of forward had finished: that stream does not wait for the"
                               " current stream, so it can read the inputs before they are written, and nothing"
                               " orders its work with the caller's. Make the side stream wait for the current stream"
                               " before launching (side.wait_stream(torch.cuda.current_stream()), or cudaEventRecord"
                               " on the current stream and cudaStreamWaitEvent on the side stream), and the current"
                               " stream wait for the side stream before returning.",
                               {"unordered": summary["unordered_kernels"]})
            if summary["unjoined_kernels"]:
                names = ", ".join(k["name"] for k in summary["unjoined_kernels"][:3])
                raise Rejected("work_outlived_call",
                               f"on {label}, kernels on another CUDA stream ({names}) were still running after forward"
                               " returned; join side streams back to the current stream before returning.",
                               {"unjoined": summary["unjoined_kernels"]})
            if summary["candidate_kernels"] == 0:
                raise Rejected("kernel_not_launched",
                               f"no kernel of the candidate ran on the GPU during ModelNew.forward on {label}"
                               f" ({summary['kernels']} kernels of torch operators did). The computation must happen"
                               " in the custom CUDA kernels of cuda_extension.", {"device_activity": summary})
        if self.counters.extension_calls + self.counters.graph_replays == 0:
            raise Rejected("kernel_not_launched",
                           f"ModelNew.forward on {label} never called cuda_extension (nor replayed a CUDA graph of its"
                           " kernels); the computation must happen in the custom extension.")
        for tensor in tensors:
            self.poison_sizes.add(tensor.numel() * tensor.element_size())
        return outputs, description, layout, guard

    @staticmethod
    def _forbidden(violation: dict, label: str) -> Rejected:
        shown = violation["operation"]
        if violation.get("called_as") and violation["called_as"] != shown:
            shown = f"{violation['called_as']} ({shown})"
        return Rejected("forbidden_operation",
                        f"ModelNew.forward ran {shown} on {label}: {violation['why']}. Inside forward only the"
                        " functions of cuda_extension and tensor creation, copy and metadata operations"
                        " (torch.empty, empty_like, zeros, view, reshape, contiguous, to, ...) may run.",
                        {"violation": violation})


class Slots:
    """Two slot files used in turn, and the steps of the plan: a slot is rewritten only
    after the reference has read its previous contents."""

    def __init__(self, directory: str, session: Session, staged: bool = False):
        self.directory = directory
        self.session = session
        self.sent = 0
        #: Waiting for the reference to answer for a slot, and writing outputs into slots.
        self.timings_ms = {"slot_wait_ms": 0.0, "slot_write_ms": 0.0}
        #: Page-locked host memory that outputs on a GPU pass through (``write_slot``).
        self.staging = tensorio.ScratchBuffer(pinned=staged)

    def next_step(self) -> dict | None:
        """The next call the reference hands out, or None when the verification is done.
        Each step arrives only after the reference read the outputs of the call before the
        previous one, so the slot that the step's outputs go into is free again."""
        mark = time.perf_counter()
        message = self.session.receive()
        self.timings_ms["slot_wait_ms"] += (time.perf_counter() - mark) * 1000
        kind = message.get("type")
        if kind == "stop":
            raise Stopped()
        if kind == "done":
            return None
        if kind != "call":
            raise SessionClosed(f"unexpected message from the reference process: {kind!r}")
        return message

    def send(self, message: dict, layout: list) -> None:
        mark = time.perf_counter()
        name = f"slot-{self.sent % 2}"
        tensorio.write_slot(os.path.join(self.directory, name), layout, self.staging)
        self.timings_ms["slot_write_ms"] += (time.perf_counter() - mark) * 1000
        message["slot"] = name
        self.session.send(message)
        self.sent += 1


def _run(args: dict, context, session: Session, report: dict) -> None:
    device = args.get("device", context.device)
    mode = args.get("mode", "eval")
    timings = report["timings_ms"]
    mark = time.monotonic()
    models.setup_device(device)
    reference_module = models.load_reference(args["reference_path"])
    reference_model, init_arguments = models.build_reference_model(
        reference_module, int(args["init_seed"]), device, mode, bool(args.get("perturb_weights", True)),
        args.get("weight_gains"))
    state = {name: tensor.detach().clone() for name, tensor in reference_model.state_dict().items()}
    del reference_model
    constants = _changed_construction(reference_module, args, device, mode, init_arguments, state)
    hygiene.warm_thread_pools(device)
    # Entering the torch modes the first time imports parts of torch that rebind some of its
    # functions; that must happen before the baseline is taken.
    with torch.no_grad(), ForwardGuard():
        torch.empty(1, device=device)
    counters = Counters()
    if device == "cuda":
        _watch_cuda_graphs(counters, args.get("policy", {}))
    timings["setup_ms"] = (time.monotonic() - mark) * 1000

    mark = time.monotonic()
    # The candidate's code must not find the reference Model in this process and run it:
    # the reference module keeps only what builds inputs (the class stays here, for the checks
    # of ModelNew's signature and bases).
    reference_class = reference_module.Model
    models.keep_inputs_only(reference_module)
    baseline = Baseline()
    module, wrapped = _import_candidate(args["candidate_directory"], counters)
    report["observations"]["extension_functions"] = wrapped
    model_class = getattr(module, "ModelNew", None)
    try:
        model = _build(module, reference_class, init_arguments, state, device, mode)
    except Rejected:
        _check_captures(counters, "the construction of ModelNew")
        raise
    _check_captures(counters, "the construction of ModelNew")
    del reference_class
    _check_aftermath(baseline, "importing and constructing ModelNew", check_threads=True)
    timings["load_ms"] = (time.monotonic() - mark) * 1000

    session.send({"type": "constructed", "weights_fingerprint": models.state_fingerprint(state),
                  "constants_fingerprint": constants["weights"] if constants else None})

    caller = Caller(model, device, counters, baseline, args.get("policy", {}))
    watch = StateWatch(model, module, weights=state, buffers_fixed=mode == "eval",
                       kept_state=args.get("policy", {}).get("kept_state"))
    slots = Slots(args["output_directory"], session, staged=device == "cuda")
    observe = device == "cuda" and args.get("policy", {}).get("observe_device_activity", True)
    inputs_of = InputSets(reference_module, device)
    mark = time.monotonic()
    calls = 0
    # The reference hands out one call at a time, each when it is due: the candidate never
    # knows how many calls remain, which input set comes next, or where its inputs will lie.
    while True:
        step = slots.next_step()
        if step is None:
            break
        label = f"call {int(step['call']) + 1}"
        if step.get("constants"):
            if constants is None or watch is None:
                raise SessionClosed("the reference asked for a call on changed constructor arguments this process"
                                    " has no weights for, or for a second one")
            # The plan is over: the first ModelNew is checked, let go, and replaced.
            watch.after_last_call()
            watch = caller.model = model = None
            model = _rebuild(model_class, constants, counters, baseline, device, mode)
            caller.model = model
        elif watch is None:
            raise SessionClosed("a call of the plan came after the call on changed constructor arguments")
        # The previous set goes first where sets are large (``InputSets``): one at a time.
        pristine = None
        pristine, fingerprint = inputs_of.get(int(step["seed"]), float(step.get("scale", 1.0)), step.get("distribution"))
        returned = [int(i) for i in step.get("return_inputs") or []]
        inputs = caller.place(pristine, step.get("placement") or {})
        outputs, description, layout, guard = caller.call(inputs, label, observe and bool(step.get("observe")))
        for index, (value, original) in enumerate(zip(inputs, pristine)):
            if isinstance(value, torch.Tensor) and index not in returned and not _equal_bits(value, original):
                raise Rejected("input_mutated",
                               f"ModelNew.forward changed input {index} in place on {label}, but the reference"
                               " leaves its inputs unchanged. Write results into new tensors.", {"input": index})
        if watch is not None:
            watch.after_call(label, [tensor for _, tensor in layout], inputs)
        input_descriptions = {}
        for index in returned:
            input_descriptions[str(index)] = tensorio.describe(inputs[index], layout)
        slots.send({"type": "outputs", "call": step["call"], "outputs": description,
                    "inputs": input_descriptions, "input_fingerprint": fingerprint}, layout)
        calls += 1
        # ``outputs`` stays alive while the next call runs, so that call's outputs cannot
        # be placed in this call's memory.
        report["observations"]["item_calls"] = guard.item_calls
    if watch is not None:
        watch.after_last_call()
    timings["calls_ms"] = (time.monotonic() - mark) * 1000
    timings.update(caller.timings_ms)
    timings.update(slots.timings_ms)
    report["observations"]["device_activity"] = caller.device_activity
    report["observations"]["checks"] = calls


def _changed_construction(module, args: dict, device: str, mode: str, arguments: list, state: dict) -> dict | None:
    """What the verification's call on changed constructor arguments needs, built before the
    candidate's code is imported (the reference Model is gone then), or None where the
    reference process makes no such call (``models.build_with_changed_constants``): the
    arguments with their floating-point numbers changed ("arguments", "changes"), the weights
    of the reference built from them ("state": ``state`` itself where they are the same, as
    they are wherever initialization reads no such number) and their fingerprint
    ("weights")."""
    built = models.build_with_changed_constants(module, int(args["init_seed"]), device, mode,
                                                bool(args.get("perturb_weights", True)), args.get("weight_gains"),
                                                arguments, state)
    if built is None:
        return None
    model, changed, changes = built
    own = model.state_dict()
    weights = models.state_fingerprint(own)
    if not all(torch.equal(tensor, state[name]) for name, tensor in own.items()):
        state = {name: tensor.detach().clone() for name, tensor in own.items()}
    return {"arguments": changed, "changes": changes, "state": state, "weights": weights}


def _rebuild(model_class: type, constants: dict, counters: Counters, baseline: Baseline, device: str, mode: str):
    """ModelNew constructed again, from the changed constructor arguments, holding the
    weights of the reference built from them, with the checks of the first construction."""
    shown = ", ".join(f"get_init_inputs()[{change['position']}] = {change['changed']!r} instead of"
                      f" {change['original']!r}" for change in constants["changes"])
    when = f"constructing ModelNew with {shown}"
    try:
        model = _construct(model_class, constants["arguments"], constants["state"], device, mode, f" when {when}")
    except Rejected:
        _check_captures(counters, when)
        raise
    _check_captures(counters, when)
    _check_aftermath(baseline, when, check_threads=True)
    return model


class InputSets:
    """The input sets of the calls, rebuilt from their seeds as the reference built them.
    The latest one is kept (calls on one set are never consecutive, so it is rebuilt for
    its next call), all of them when they are small."""

    KEEP_ALL_BYTES = 256 << 20

    def __init__(self, module, device: str):
        self.module = module
        self.device = device
        self.kept: dict[str, tuple[list, str]] = {}
        self.set_bytes = 0

    def get(self, seed: int, scale: float, distribution) -> tuple[list, str]:
        key = repr((seed, scale, distribution))
        if key not in self.kept:
            # Released before the next one is built when they are large: one set at a time.
            if self.set_bytes * (len(self.kept) + 1) > self.KEEP_ALL_BYTES:
                self.kept.clear()
            inputs = models.generate_inputs(self.module, seed, scale, self.device, distribution)
            self.set_bytes = sum(value.numel() * value.element_size() for value in inputs
                                 if isinstance(value, torch.Tensor))
            self.kept[key] = (inputs, models.fingerprint(inputs))
        return self.kept[key]


@handler("candidate", prepared=True)
def candidate(args: dict, context) -> dict:
    """Args: reference_path, candidate_directory, output_directory, session_directory, device,
    init_seed, mode, perturb_weights, weight_gains, policy {extra_allowed_operations,
    observe_device_activity, kept_state (the audit's: state the reference keeps between calls)}."""
    report = {"status": "rejected", "rejection": None, "observations": {}, "timings_ms": {}}
    session = Session(args["session_directory"], "candidate", context.deadline)
    try:
        _run(args, context, session, report)
        report["status"] = "completed"
    except Rejected as rejection:
        report["rejection"] = rejection.as_dict()
        try:
            session.send({"type": "abort"})
        except SessionClosed:
            pass
    except Stopped:
        report["status"] = "stopped"
    except (SessionClosed, SessionTimeout) as error:
        report["status"] = "session_closed"
        report["observations"]["session"] = str(error)
    finally:
        session.close()
    return report

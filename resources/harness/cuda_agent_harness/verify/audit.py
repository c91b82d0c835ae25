# SPDX-License-Identifier: Apache-2.0
"""The ``audit`` handler: whether a task can tell a real implementation from a null one,
and which stress inputs it needs for that.

A task whose outputs are insensitive to the computation (all outputs inside the tolerance
of zero, of a constant, of the input) would reward a candidate that computes nothing. The
null models:
  zeros        zeros shaped like each output;
  constant     each output filled with the mean of the first input set's output (a
               constant a candidate could hard-code);
  mean         each output filled with its own mean (a statistic, as cheap as a sample of
               the output would give; outputs of one element get the constant instead);
  passthrough  an input with as many elements as the output, reshaped;
  replay       the first input set's outputs, whatever the inputs.

The audit runs the reference on the task's own input sets (as a verification draws them)
and reports which null models pass all of them. When one does, it tries the stress
distributions of ``models.STRESS_KINDS`` in order, each on two input sets, folded onto the
positive half-line when the reference leaves its domain on the signed form (an exception,
or non-finite outputs where the task's own inputs gave finite ones), and keeps every
distribution that fails a null model still passing on both of its sets, until none passes.
Heavy-tailed inputs are kept too, on every task, when they are in the domain and fewer than
two distributions were needed (none at all when no null model passed): statistics computed
from a sample of the elements pass independent, identically distributed inputs, and no null
model stands for them. Then SPARSE_SETS sparse sets follow, the task's own inputs with one
element of each from the first distribution kept (when the reference stays in its domain
there): a kernel that tests a sample of its inputs and takes a shortcut when the sample allows
it passes the task's own sets (where the shortcut is right) and the stress sets (where its
sample sees that it would be wrong, and it computes), and fails a sparse set, whose one
differing element its sample misses. A task where some null model passes every distribution
is unfit to be scored, and so is a task whose reference only moves data (``DATA_MOVEMENT``:
a candidate's own copies and views match it). A task whose reference normalizes (``NORMALIZATIONS``, the operators
it runs, or a root of a reduction: ``ROOTS``, ``REDUCTIONS``) gets a flat set too
(``models.FLAT``: slices of zeros, whose variance and mean square are zero), and a task with
floating-point numbers among its inputs a set with them negated (``models.NEGATED_SCALARS``),
where the reference stays in its domain. Integers among the inputs are shifted by one in a set
of their own (``models.SHIFTED_INTEGERS``) where the outputs keep their shapes (an operand, not
a size), and integer tensors get sets holding the values the reference's losses ignore and
those its modules' settings name (a ``pad_id``, a ``mask_token``: ``models.INTEGER_SENTINELS``),
in a set where one element in 16 holds the value and DENSE_SENTINEL_SETS where all but two do. Heavy
tails whose spikes take the reference out of its domain are tried once more held to a milder
spike (``models.MILD_HEAVY_TAIL_SPIKE``).

Before all that, the audit looks for weights too small for the tolerance to see
(``weight_gains``): verification enlarges them, so that a kernel which leaves one out fails.

The audit also records the state the reference keeps from call to call on its own (tensors
it replaces in its attributes every call, ``checks.steadiness.KeptStateLog``): ModelNew may
keep the same, and nothing else.

The host caches the result per task and harness version, and every verification of the
task then replaces some of its input sets with the distributions kept."""

from __future__ import annotations

import re
import torch

from ..checks import compare
from .. import models
from ..checks.compare import Failure
from ..checks.steadiness import KeptStateLog
from . import operators
from ..checks import guard
from .reference import Expected, describe_set, set_specs
from ..registry import handler

NULL_MODELS = ("zeros", "constant", "mean", "passthrough", "replay")

#: Input sets per stress distribution: a null model counts as failed only if it fails both.
PROBES = 2
#: Sparse sets (``models.SPARSE``: the task's own inputs with one element of each from the
#: first stress distribution kept) a verification gets. A kernel that tests a sample of a
#: fraction f of its inputs for a property of the task's own inputs, and takes a shortcut
#: when the sample has it, passes a sparse set when its sample sees the stress element
#: (probability f at most, none for a prefix or a strided sample: models.SPARSE_MARGIN): two
#: sets leave it f squared (one in 4096 for every 64th element drawn at random).
SPARSE_SETS = 2
#: aten operators (overload packets) that normalize: a task whose reference runs one gets a
#: flat set (``models.FLAT``), where a normalization without its epsilon divides by zero.
NORMALIZATIONS = frozenset({
    "native_layer_norm", "layer_norm", "native_group_norm", "group_norm", "native_batch_norm", "batch_norm",
    "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional",
    "cudnn_batch_norm", "miopen_batch_norm", "instance_norm", "rms_norm", "_fused_rms_norm", "var", "std",
    "var_mean", "std_mean",
})
#: aten operators (overload packets) that only move data: what the forward guard lets a
#: candidate's forward run (creation, copies, views), and the joins, repeats and flips that
#: copies into views of one output make.
DATA_MOVEMENT = guard.ALLOWED_ATEN | frozenset({
    "cat", "stack", "hstack", "vstack", "dstack", "column_stack", "repeat", "tile", "flip", "roll", "constant_pad_nd",
    "expand_copy", "permute_copy", "transpose_copy", "t_copy", "view_copy", "slice_copy", "select_copy",
})
#: A root of a reduction is a normalization written out (an RMS norm as
#: ``x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + eps)``).
ROOTS = frozenset({"sqrt", "rsqrt"})
REDUCTIONS = frozenset({"mean", "sum", "norm", "linalg_vector_norm", "var", "std"})


#: aten operators (overload packets) of the losses that skip targets equal to their
#: ``ignore_index`` (``models.INTEGER_SENTINELS``), and torch's default for it.
IGNORING_LOSSES = frozenset({"nll_loss", "nll_loss_forward", "nll_loss2d", "nll_loss2d_forward", "nll_loss_nd",
                             "cross_entropy_loss"})
IGNORE_INDEX_DEFAULT = -100


def _mean(tensor: torch.Tensor) -> float:
    return tensor.double().mean().item() if tensor.numel() and tensor.dtype.is_floating_point else 0


class NullModels:
    """The null models' outputs, with what they take from the first input set."""

    def __init__(self, first: Expected):
        self.first = first
        self.constants = [_mean(tensor) for tensor in first.tensors]

    def outputs(self, name: str, expected: Expected, inputs: list) -> list | None:
        """What null model ``name`` returns for ``inputs``, or None where it cannot apply."""
        made = []
        for position, tensor in enumerate(expected.tensors):
            if name == "zeros":
                made.append(torch.zeros_like(tensor))
            elif name == "constant" or (name == "mean" and tensor.numel() == 1):
                made.append(torch.full_like(tensor, self.constants[position]))
            elif name == "mean":
                made.append(torch.full_like(tensor, _mean(tensor)))
            elif name == "passthrough":
                source = next((x for x in inputs if isinstance(x, torch.Tensor) and x.numel() == tensor.numel()), None)
                if source is None:
                    return None
                made.append(source.reshape(tensor.shape).to(tensor.dtype))
            elif name == "replay":
                if position >= len(self.first.tensors) or self.first.tensors[position].shape != tensor.shape:
                    return None
                made.append(self.first.tensors[position])
        return made


def _nonfinite(tensors: list) -> int:
    return sum(int((~torch.isfinite(t)).sum()) for t in tensors if t.dtype.is_floating_point or t.dtype.is_complex)


class Auditor:
    def __init__(self, module, model, args: dict, device: str):
        self.module = module
        self.model = model
        self.args = args
        self.device = device
        self.tolerance = args["tolerance"]
        self.nulls: NullModels | None = None
        self.own_nonfinite_fraction = 0.0
        #: Whether the task's own inputs hold floating-point numbers (a negated set applies),
        #: integers (a shifted set applies) and integer tensors (sentinel sets apply).
        self.has_numbers = False
        self.has_integers = False
        self.has_integer_tensors = False
        self.kept_state = KeptStateLog(model)
        #: The shapes and dtypes of the outputs on the task's own inputs.
        self.output_shapes: list | None = None

    def run_set(self, seed: int, scale: float, distribution) -> tuple[Expected, list]:
        """The reference's outputs on one input set (raises models.TaskError if it fails)."""
        inputs = models.generate_inputs(self.module, seed, scale, self.device, distribution)
        working = [value.clone() if isinstance(value, torch.Tensor) else value for value in inputs]
        with torch.no_grad():
            try:
                outputs = self.model(*working)
            except Exception as error:
                raise models.TaskError(f"the reference Model raised {type(error).__name__}: {error}") from error
        self.kept_state.after_call()
        if self.device == "cuda":
            torch.cuda.synchronize()
        return Expected(outputs, inputs, working, "", self.tolerance), inputs

    def verdicts(self, expected: Expected, inputs: list, names) -> dict:
        """For each null model of ``names`` that applies: None if it passes this set, else
        the message of its first mismatch."""
        found = {}
        for name in names:
            outputs = self.nulls.outputs(name, expected, inputs)
            if outputs is None:
                continue
            try:
                for position, (path, want, got) in enumerate(zip(expected.leaves, expected.tensors, outputs)):
                    compare.compare_tensor(want, got, expected.tolerances[position], compare.label(path))
                found[name] = None
            except Failure as failure:
                found[name] = failure.message
        return found

    def own_sets(self) -> dict:
        results: dict[str, dict] = {}
        total = counted = 0
        for index, spec in enumerate(set_specs(self.args)):
            expected, inputs = self.run_set(*spec)
            self.has_numbers = self.has_numbers or any(type(value) is float and value != 0.0 for value in inputs)
            self.has_integers = self.has_integers or any(type(value) is int for value in inputs)
            self.has_integer_tensors = self.has_integer_tensors or any(
                isinstance(value, torch.Tensor) and value.numel() and not value.dtype.is_floating_point
                and not value.dtype.is_complex and value.dtype != torch.bool for value in inputs)
            if self.output_shapes is None:
                self.output_shapes = _shapes(expected)
            if self.nulls is None:
                self.nulls = NullModels(expected)
            counted += _nonfinite(expected.tensors)
            total += sum(t.numel() for t in expected.tensors)
            open_names = [name for name in NULL_MODELS if results.get(name, {"passes": True})["passes"]]
            for name, message in self.verdicts(expected, inputs, open_names).items():
                results[name] = ({"passes": True, "message": ""} if message is None else
                                 {"passes": False, "message": f"{describe_set(index, spec)}: {message}"})
        self.own_nonfinite_fraction = counted / total if total else 0.0
        return results

    def probe(self, distribution: dict, names: list[str], same_shapes: bool = False) -> dict:
        """How ``distribution`` does on PROBES input sets: in the reference's domain or not
        (and why), and which of the null models ``names`` fail every one of its sets. With
        ``same_shapes``, outputs of other shapes or dtypes than the task's own leave the
        domain too."""
        failing = set(names)
        for probe in range(PROBES):
            seed = models._derived_seed("audit", self.args["seeds"][probe % len(self.args["seeds"])], probe,
                                        *_probe_key(distribution)) & 0xFFFFFFFF
            try:
                expected, inputs = self.run_set(seed, 1.0, distribution)
            except models.TaskError as error:
                return {"distribution": distribution, "in_domain": False, "why": str(error), "separates": []}
            if same_shapes and _shapes(expected) != self.output_shapes:
                return {"distribution": distribution, "in_domain": False, "separates": [],
                        "why": "the reference's outputs change shape or dtype (the integers are sizes)"}
            elements = sum(t.numel() for t in expected.tensors)
            fraction = _nonfinite(expected.tensors) / elements if elements else 0.0
            if fraction > self.own_nonfinite_fraction:
                return {"distribution": distribution, "in_domain": False,
                        "why": f"the reference's outputs are not finite ({fraction:.3g} of the elements)",
                        "separates": []}
            verdicts = self.verdicts(expected, inputs, sorted(failing))
            failing = {name for name in failing if verdicts.get(name) is not None}
        return {"distribution": distribution, "in_domain": True, "why": "", "separates": sorted(failing)}

    def probe_kind(self, kind: str, names: list[str], tried: list) -> dict:
        """The signed form of ``kind``, or its positive form where the signed one leaves the
        reference's domain; for heavy tails, then the same held to a milder spike
        (``models.MILD_HEAVY_TAIL_SPIKE``)."""
        forms = [{"kind": kind, "positive": False}, {"kind": kind, "positive": True}]
        if kind == "heavy_tailed":
            forms += [dict(form, spike=models.MILD_HEAVY_TAIL_SPIKE) for form in forms]
        for form in forms:
            result = self.probe(form, names)
            tried.append(result)
            if result["in_domain"]:
                break
        return result


def _shapes(expected: Expected) -> list:
    return [(tuple(tensor.shape), str(tensor.dtype)) for tensor in expected.tensors]


def _probe_key(distribution: dict) -> tuple:
    """What a probe's seeds are derived from (a stress distribution's as before sparse sets)."""
    if distribution["kind"] in (models.FLAT, models.NEGATED_SCALARS, models.SHIFTED_INTEGERS):
        return (distribution["kind"],)
    if distribution["kind"] == models.INTEGER_SENTINELS:
        return distribution["kind"], distribution["value"], *(("dense",) if distribution.get("dense") else ())
    if distribution["kind"] == models.SPARSE:
        return (models.SPARSE, *_probe_key(distribution["stress"]))
    if distribution.get("spike") is not None:
        return distribution["kind"], distribution["positive"], distribution["spike"]
    return distribution["kind"], distribution["positive"]


#: Gains tried, in order, on a weight whose removal the tolerance cannot see.
WEIGHT_GAINS = (10.0, 100.0, 1000.0)
#: Tensors of the state dict the gain search looks at, at most (one forward each, and one
#: or two more per gain tried, once per task).
MAX_GAIN_PROBES = 256


def weight_gains(module, model, args: dict, device: str) -> tuple[dict, dict]:
    """Gains for the weights the tolerance cannot see, and what the search found.

    The perturbation keeps a randomly initialized tensor at its own scale, and a task may
    initialize one so small that leaving it out changes no output beyond the tolerance (a
    shift drawn with a standard deviation of 5e-4 after a projection whose outputs are
    near 0.6): a kernel that skips it would pass. Each floating tensor of the state dict
    (the perturbation's, in its order) is zeroed on the task's first input set; where the
    outputs stay within the tolerance, the tensor is multiplied by the first of
    ``WEIGHT_GAINS`` under which zeroing it shows and the outputs stay finite, and keeps
    that gain (later tensors are judged with it). A tensor no gain makes visible is left
    as it is: nothing reads it enough to matter. Verification applies the gains after the
    perturbation in both processes (``models.build_reference_model``); the audit's own
    sets below already run with them. The model's state is otherwise as it was."""
    seed, scale, distribution = set_specs(args)[0]
    inputs = models.generate_inputs(module, seed, scale, device, distribution)

    def run():
        working = [value.clone() if isinstance(value, torch.Tensor) else value for value in inputs]
        with torch.no_grad():
            outputs = model(*working)
        if device == "cuda":
            torch.cuda.synchronize()
        return outputs

    saved = {name: value.detach().clone() for name, value in model.state_dict().items()}
    parameters = {id(value) for value in model.parameters()}
    state = model.state_dict(keep_vars=True)
    candidates, seen = [], set()
    for name, value in state.items():
        if not isinstance(value, torch.Tensor) or not value.dtype.is_floating_point or not value.numel():
            continue
        if id(value) in seen or (id(value) not in parameters and models._is_structural(value)):
            continue
        seen.add(id(value))
        candidates.append((name, value))
    report = {"probed": min(len(candidates), MAX_GAIN_PROBES), "tensors": len(candidates), "invisible": []}
    gains: dict[str, float] = {}
    try:
        try:
            base = Expected(run(), inputs, inputs, "", args["tolerance"])
        except Exception:  # the own sets report a reference that fails
            return {}, report
        if _nonfinite(base.tensors):
            return {}, report
        for name, value in candidates[:MAX_GAIN_PROBES]:
            original = value.detach().clone()
            with torch.no_grad():
                value.zero_()
            without = run()
            with torch.no_grad():
                value.copy_(original)
            if base.mismatch(without) is not None:
                continue
            for gain in WEIGHT_GAINS:
                with torch.no_grad():
                    value.copy_(original * gain)
                gained = Expected(run(), inputs, inputs, "", args["tolerance"])
                if _nonfinite(gained.tensors):
                    break
                with torch.no_grad():
                    value.zero_()
                without = run()
                with torch.no_grad():
                    value.copy_(original * gain)
                if gained.mismatch(without) is not None:
                    gains[name] = gain
                    break
            if name in gains:
                base = gained  # later tensors are judged against outputs with this one's gain
            else:
                report["invisible"].append(name)
    finally:
        # Calls in train mode move running statistics: the state goes back to what was built,
        # with the gains found.
        with torch.no_grad():
            for name, value in state.items():
                if isinstance(value, torch.Tensor) and name in saved:
                    value.copy_(saved[name])
        models.apply_weight_gains(model, gains)
    return gains, report


def audit_task(module, model, args: dict, device: str) -> dict:
    gains, gain_search = weight_gains(module, model, args, device) if args.get("perturb_weights", True) else ({}, {})
    auditor = Auditor(module, model, args, device)
    own = auditor.own_sets()
    passing = sorted(name for name, verdict in own.items() if verdict["passes"])
    remaining = list(passing)
    chosen: list[dict] = []
    tried: list[dict] = []
    if passing:
        for kind in models.STRESS_KINDS:
            if not remaining:
                break
            result = auditor.probe_kind(kind, remaining, tried)
            if result["in_domain"] and result["separates"]:
                chosen.append(result["distribution"])
                remaining = [name for name in remaining if name not in result["separates"]]
    # Whether or not a null model passed: statistics taken from a sample of the elements
    # pass any task on independent, identically distributed inputs, and no null model
    # stands for them (a layer norm's mean and variance from every 16th element).
    if not remaining and len(chosen) < 2 and all(spec["kind"] != "heavy_tailed" for spec in chosen):
        result = next((entry for entry in tried if entry["distribution"]["kind"] == "heavy_tailed"
                       and entry["in_domain"]), None) or auditor.probe_kind("heavy_tailed", [], tried)
        if result["in_domain"]:
            chosen.append(result["distribution"])
    # Stress sets make a kernel that tests a sample of its inputs (for a sign, say) compute
    # honestly; sparse sets hide one stress element among the task's own values, where the
    # sample does not look. In the domain when the reference keeps its outputs finite there.
    if not remaining and chosen:
        sparse = auditor.probe({"kind": models.SPARSE, "stress": chosen[0]}, [])
        tried.append(sparse)
        if sparse["in_domain"]:
            chosen.extend([sparse["distribution"]] * SPARSE_SETS)
    # A slice of constant inputs has no variance: a normalization needs its epsilon there.
    run = operators.recorded(module, device)
    normalizations = sorted(run & NORMALIZATIONS or (run & (ROOTS | REDUCTIONS) if run & ROOTS and run & REDUCTIONS
                                                     else set()))
    if not remaining and normalizations:
        flat = auditor.probe({"kind": models.FLAT}, [])
        tried.append(flat)
        if flat["in_domain"]:
            chosen.append(flat["distribution"])
    # Numbers among the inputs keep their sign from set to set: one set negates them.
    if not remaining and auditor.has_numbers:
        negated = auditor.probe({"kind": models.NEGATED_SCALARS}, [])
        tried.append(negated)
        if negated["in_domain"]:
            chosen.append(negated["distribution"])
    # Integers among the inputs are the same in every set: one set shifts them, where they
    # are operands (the outputs keep their shapes), not sizes.
    if not remaining and auditor.has_integers:
        shifted = auditor.probe({"kind": models.SHIFTED_INTEGERS}, [], same_shapes=True)
        tried.append(shifted)
        if shifted["in_domain"]:
            chosen.append(shifted["distribution"])
    # Integer tensors never hold the values the reference treats apart (a target a cross
    # entropy ignores, a padding id): sets that hold them, where the outputs keep their shapes.
    if not remaining and auditor.has_integer_tensors:
        for value in _sentinels(run, model):
            # A few sentinels (a kernel that has no case for them) and many (an average over
            # what a loss does not ignore, which a few barely move).
            for dense, sets in ((False, 1), (True, DENSE_SENTINEL_SETS)):
                spec = models.check_distribution({"kind": models.INTEGER_SENTINELS, "value": value, "dense": dense})
                sentinel = auditor.probe(spec, [], same_shapes=True)
                tried.append(sentinel)
                if sentinel["in_domain"]:
                    chosen.extend([sentinel["distribution"]] * sets)
    # A reference that only moves data can be matched by the copies and views a candidate's
    # forward may make itself: nothing tells a kernel from them.
    moves_only = bool(run) and run <= DATA_MOVEMENT
    report = {"degenerate": bool(passing), "passing": passing, "null_models": own, "stress": chosen,
              "tried": tried, "unfit": bool(remaining) or moves_only, "still_passing": remaining,
              "outputs": auditor.nulls.first.description if auditor.nulls else None,
              "input_sets": len(args["seeds"]), "kept_state": auditor.kept_state.kept,
              "normalizations": normalizations, "moves_only": moves_only, "weight_gains": gains,
              "weight_gain_search": gain_search}
    if moves_only and not remaining:
        report["message"] = (
            f"this task only moves data (its reference runs {', '.join(sorted(run))}), which the copies and views a"
            " candidate's forward may make itself do as well: nothing tells a kernel from them. It is not scored.")
    if remaining:
        report["message"] = (
            f"this task cannot tell a real implementation from a null one: the {', '.join(remaining)} null"
            f" model{'s pass' if len(remaining) > 1 else ' passes'} every input set, the task's own and every stress"
            f" distribution tried in the reference's domain ({_tried_text(tried)}). It is not scored.")
    return report


#: Names of integer settings of a model that single out values of its integer inputs (a
#: padding id, a token a mask or a loss ignores, a blank label).
SENTINEL_NAMES = re.compile(r"(?:^|_)(?:pad|padding|ignore|mask|masked|eos|bos|sep|cls|blank|unk|sentinel|null)(?:_|$)|"
                            r"_(?:id|idx|index|token)$")
#: Sentinel values per task, at most (each is 1 + DENSE_SENTINEL_SETS more input sets in every
#: verification).
MAX_SENTINELS = 3
#: Dense sentinel sets per sentinel value. A cross entropy over 512 targets of which 2 are
#: kept (``models.DENSE_SENTINEL_KEPT``), against a kernel that counts the ignored targets as
#: class 0, differed beyond the tolerance in 94% of sets (400 seeds): two sets leave the kernel
#: a chance in 250.
DENSE_SENTINEL_SETS = 2


def _sentinels(run: set[str], model) -> list[int]:
    """The integer values the reference gives a meaning of their own: the ``ignore_index``
    of its losses (-100 unless a module of the model says otherwise), and the integer
    settings of its modules named as such values (``pad_id``, ``mask_token``,
    ``padding_idx``). The task's own inputs may never hold them (tokens drawn from 1 up
    leave a padding id of 0 out), so a kernel that ignores them would pass."""
    values = {IGNORE_INDEX_DEFAULT} if run & IGNORING_LOSSES else set()
    named = set()
    for module in model.modules():
        value = getattr(module, "ignore_index", None)
        if type(value) is int and run & IGNORING_LOSSES:
            values.add(value)
        for name, setting in vars(module).items():
            if type(setting) is int and SENTINEL_NAMES.search(name.lower()):
                named.add(setting)
    return sorted(values | named)[:MAX_SENTINELS]


def _tried_text(tried: list) -> str:
    parts = []
    for entry in tried:
        name = models.describe_distribution(entry["distribution"])
        parts.append(f"{name}: {'outside the domain, ' + entry['why'] if not entry['in_domain'] else 'in the domain'}")
    return "; ".join(parts) or "none"


@handler("audit")
def audit(args: dict, context) -> dict:
    """Args as for ``reference`` (no session): reference_path, device, init_seed, seeds,
    scales, mode, perturb_weights, tolerance."""
    device = args.get("device", context.device)
    models.setup_device(device)
    module = models.load_reference(args["reference_path"])
    model, _ = models.build_reference_model(module, int(args["init_seed"]), device, args.get("mode", "eval"),
                                            bool(args.get("perturb_weights", True)))
    return audit_task(module, model, args, device)

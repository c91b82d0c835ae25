# SPDX-License-Identifier: Apache-2.0
"""The task's reference module: loading it, building ``Model`` with seeded weights, and
generating input sets from seeds. The reference process and the candidate process both
do this and obtain the same weights and inputs bit for bit, so no tensor has to travel
between them; a fingerprint of each confirms it."""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import sys

import torch
import torch.nn as nn

from .modules import load_module


class TaskError(Exception):
    """The task itself is broken (the reference fails, or is not reproducible)."""


def setup_device(device: str) -> None:
    if device == "cuda":
        if not torch.cuda.is_available():
            raise TaskError("device 'cuda' was requested but torch sees no CUDA device in this process")
        torch.cuda.init()
        torch.cuda.set_device(0)
        torch.empty(1, device="cuda")  # creates the context and the allocator now


def load_reference(path: str):
    try:
        module = load_module(path, "cuda_agent_reference")
    except Exception as error:
        raise TaskError(f"the reference module failed to import: {type(error).__name__}: {error}") from error
    for required in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, required):
            raise TaskError(f"the reference module defines no {required}")
    return module


#: What the candidate's process keeps of the reference module once ModelNew is to be loaded.
INPUT_FUNCTIONS = ("get_inputs", "get_init_inputs")


def _names_used(value) -> set[str]:
    """The global names a function (its nested code: comprehensions, inner functions) or
    the methods of a class may look up: a superset, since attribute names are among them."""
    codes = []
    if isinstance(value, type):
        for member in vars(value).values():
            member = getattr(member, "__func__", member)
            if isinstance(member, property):
                codes.extend(f.__code__ for f in (member.fget, member.fset, member.fdel) if f is not None)
            elif hasattr(member, "__code__"):
                codes.append(member.__code__)
    elif hasattr(value, "__code__"):
        codes.append(value.__code__)
    names: set[str] = set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(constant for constant in code.co_consts if hasattr(constant, "co_names"))
    return names


def keep_inputs_only(module) -> None:
    """Strips the reference ``module`` down to get_inputs, get_init_inputs and the module-level
    names they use, directly or through the functions and classes they call (sizes,
    constants, helpers, imported modules such as torch), and removes it from sys.modules.

    The candidate's process needs the reference for the weights and the inputs only, and
    builds the weights before the candidate's code is imported; what it keeps afterwards
    must not let that code find the reference Model and run it (the functions' own globals
    are this module's namespace, which is stripped in place). Input generation is unchanged:
    the same names resolve to the same objects."""
    namespace = vars(module)
    kept = {name for name in namespace if name.startswith("__") and name.endswith("__")}
    pending = [name for name in INPUT_FUNCTIONS if name in namespace]
    while pending:
        name = pending.pop()
        if name in kept or name not in namespace:
            continue
        kept.add(name)
        value = namespace[name]
        if getattr(value, "__module__", None) == module.__name__:  # a function or class of the file
            pending.extend(used for used in _names_used(value) if used in namespace)
    for name in [name for name in namespace if name not in kept]:
        del namespace[name]
    for name, registered in list(sys.modules.items()):
        if registered is module:
            del sys.modules[name]


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % (2**32))


def init_inputs(module, seed: int, device: str) -> list:
    seed_everything(seed)
    with torch.device(device):
        values = module.get_init_inputs()
    return list(values) if isinstance(values, (list, tuple)) else [values]


#: Perturbation sizes. A tensor that is constant at initialization (ones, zeros, 0.5) gets
#: values spread over +-50% of its value (zeros: +-50% of the scale of the module's other
#: tensors), enough that a kernel which treats it as the constant is far outside any
#: tolerance; a tensor drawn at random keeps its scale: each element is multiplied by a
#: factor in [0.75, 1.25] and, unless all its elements share one sign, moved by noise of a
#: tenth of its root mean square.
CONSTANT_SPREAD = 0.5
#: The share of a constant parameter's elements that a perturbation makes negative.
NEGATIVE_SHARE = 0.25
RANDOM_FACTOR_SPREAD = 0.25
RANDOM_NOISE_FRACTION = 0.1


def _derived_seed(*parts) -> int:
    """A 63-bit seed from ``parts``, the same in every process (unlike ``hash``)."""
    digest = hashlib.sha256(":".join(str(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _uniform(tensor: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Uniform noise in [-1, 1) shaped like ``tensor``, drawn in float32 on its device."""
    return torch.rand(tensor.shape, generator=generator, device=tensor.device, dtype=torch.float32) * 2 - 1


#: Elements reduced at a time in float64 (bounds the temporaries for inputs of billions).
_CHUNK = 1 << 24


def _moments(tensor: torch.Tensor) -> tuple[float, float, float]:
    """Mean, standard deviation and root mean square, accumulated in float64 chunk by chunk."""
    flat = tensor.detach().reshape(-1)
    count = flat.numel()
    if not count:
        return 0.0, 0.0, 0.0
    total = squares = 0.0
    for chunk in flat.split(_CHUNK):
        chunk = chunk.double()
        total += float(chunk.sum())
        squares += float(chunk.square().sum())
    mean = total / count
    mean_square = squares / count
    return mean, max(mean_square - mean * mean, 0.0) ** 0.5, mean_square ** 0.5


def _rms(tensor: torch.Tensor) -> float:
    return _moments(tensor)[2]


def _is_structural(tensor: torch.Tensor) -> bool:
    """A buffer whose values are all integers but not all equal: a mask or an index table
    (a causal mask of ones and zeros, positions). Perturbing it would change what the
    model computes rather than the weights it computes with."""
    flat = tensor.detach().reshape(-1)
    return bool((flat == flat.round()).all()) and bool((flat != flat[0]).any())


def perturb_parameters(model: nn.Module, seed: int) -> list[str]:
    """Gives every floating parameter and persistent buffer of ``model`` (everything in its
    state dict that a kernel computes with) new values drawn from ``seed``, at the scale it
    had, and returns their names.

    Defaults let a kernel that ignores a tensor pass: an evaluated BatchNorm with weight 1,
    bias 0, mean 0 and variance 1 is the identity, a parameter initialized to ones is a
    factor a kernel can leave out or take for positive, and a LayerScale of 1e-5 a branch it
    can skip within the tolerance. Constant parameters therefore get spread values at their
    own or their module's scale, a quarter of them negative; constant buffers spread values
    of their own sign (variances stay positive); zeros borrow their module's scale; random
    tensors are multiplied by factors near 1 (plus noise when they have both signs). Integer-valued buffers that are not constant (masks,
    index tables) and buffers outside the state dict (which the candidate does not receive)
    are left alone.

    Each tensor's noise comes from its own generator, seeded from ``seed`` and its name, on
    its own device: the reference and the candidate process obtain the same values bit for
    bit, and a tensor's values do not depend on which other tensors the model has."""
    parameters = {id(value) for value in model.parameters()}
    state = model.state_dict(keep_vars=True)
    floating = {name: value for name, value in state.items()
                if isinstance(value, torch.Tensor) and value.dtype.is_floating_point and value.numel()}
    structural = {name for name, value in floating.items() if id(value) not in parameters and _is_structural(value)}
    # Measured before anything changes: the scale that a zero tensor borrows from its module.
    scales = {name: _rms(value) for name, value in floating.items() if name not in structural}
    seen: set[int] = set()
    touched = []
    for name, value in floating.items():
        if id(value) in seen:
            continue  # a tied tensor, perturbed once under its first name
        seen.add(id(value))
        if name in structural:
            continue
        generator = _generator(value.device, _derived_seed("weights", seed, name))
        work = value.detach().float()
        noise = _uniform(work, generator)
        low, high = float(work.min()), float(work.max())
        owner = name.rsplit(".", 1)[0] + "." if "." in name else ""
        siblings = [scale for other, scale in scales.items() if other != name and other.startswith(owner)
                    and "." not in other[len(owner):] and scale > 0]
        if low == high == 0.0:
            new = noise.mul_(CONSTANT_SPREAD * (max(siblings) if siblings else 1.0))
        elif low == high and id(value) in parameters and value.numel() > 1:
            # A parameter that starts constant (a gain of ones, LayerScale's 1e-5) is a weight
            # like any other once trained: values at its own or its module's scale (one when it
            # has no sibling), a quarter of them negative, so that a kernel that leaves it out
            # or assumes its sign is wrong. Buffers keep their sign: variances stay positive.
            magnitude = max(abs(low), max(siblings) if siblings else 1.0)
            signs = torch.where(_uniform01(work.shape, generator, work.device) < NEGATIVE_SHARE, -1.0, 1.0)
            new = noise.mul_(CONSTANT_SPREAD).add_(1).mul_(magnitude).mul_(signs)
        elif low == high:
            new = noise.mul_(CONSTANT_SPREAD).add_(1).mul_(low)
        else:
            new = noise.mul_(RANDOM_FACTOR_SPREAD).add_(1).mul_(work)
            if low < 0 < high:
                extra = torch.randn(work.shape, generator=generator, device=work.device, dtype=torch.float32)
                new.add_(extra.mul_(RANDOM_NOISE_FRACTION * scales[name]))
        with torch.no_grad():
            value.copy_(new.to(value.dtype))
        touched.append(name)
    return touched


def apply_weight_gains(model: nn.Module, gains: dict | None) -> None:
    """Multiplies the tensors of ``model``'s state dict that ``gains`` names by their gain
    (the task's audit finds them: ``verify.audit.weight_gains``). Names the model lacks
    are ignored: a gain found under another build of the task gives no reason to fail."""
    if not gains:
        return
    state = model.state_dict(keep_vars=True)
    with torch.no_grad():
        for name, gain in gains.items():
            value = state.get(name)
            if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
                value.mul_(float(gain))


def build_reference_model(module, init_seed: int, device: str, mode: str, perturb: bool, gains: dict | None = None,
                          arguments: list | None = None):
    """The reference as verification runs it: built under ``init_seed`` (from ``arguments``,
    by default ``get_init_inputs()``), its weights perturbed (``perturb_parameters``) and
    then multiplied by the audit's ``gains``."""
    if arguments is None:
        arguments = init_inputs(module, init_seed, device)
    seed_everything(init_seed)
    with torch.device(device):
        model = module.Model(*arguments)
    model = model.to(device)
    if perturb:
        perturb_parameters(model, init_seed + 1)
    apply_weight_gains(model, gains)
    model.train(mode == "train")
    return model, arguments


# ---------------------------------------------------------------------------------------
# Constructor constants

#: The verification's last call multiplies each finite, nonzero floating-point constructor
#: argument by a factor of its own in this range, drawn from the init seed (below one, so
#: that a probability or a fraction stays in its domain).
CONSTANT_FACTOR_RANGE = (0.5, 0.9)
#: Draws of the factors that keep the numbers' order, before one shared factor is taken.
CONSTANT_FACTOR_DRAWS = 16


def _keeps_order(original: list[float], changed: list[float]) -> bool:
    """Whether every pair of numbers compares the same way before and after."""
    return all((a < b) == (c < d) and (a == b) == (c == d)
               for (a, c), (b, d) in itertools.combinations(list(zip(original, changed)), 2))


def changed_constants(arguments: list, init_seed: int) -> tuple[list, list[dict]]:
    """``arguments`` (``get_init_inputs()``'s) with every finite, nonzero floating-point
    number multiplied by a factor of its own drawn from ``init_seed``, and what changed:
    {"position", "original", "changed"} each. A KernelBench reference takes a divisor, a
    scaling factor, a slope or a bound as a number of its constructor, and ModelNew gets the
    same number: a kernel that hard-codes it instead of reading it is right for
    get_init_inputs() alone. Factors of their own change the numbers' ratios too (a kernel
    that takes a lower bound as minus the upper one, or one number as a multiple of another,
    is caught as well); the numbers keep their signs and their order (a lower bound stays
    below its upper bound), with one factor for all where CONSTANT_FACTOR_DRAWS draws did not
    keep it. Integers are sizes, counts and kernel sizes (they change shapes), booleans and
    strings are switches; they stay, and so do numbers inside containers."""
    low, high = CONSTANT_FACTOR_RANGE
    positions = [position for position, value in enumerate(arguments)
                 if isinstance(value, float) and math.isfinite(value) and value != 0.0]
    original = [float(arguments[position]) for position in positions]

    def factor(*parts) -> float:
        return low + (high - low) * (_derived_seed("constants", init_seed, *parts) / float(1 << 63))

    values = None
    for draw in range(CONSTANT_FACTOR_DRAWS):
        candidate = [number * factor(draw, position) for number, position in zip(original, positions)]
        if _keeps_order(original, candidate):
            values = candidate
            break
    if values is None:
        shared = factor()
        values = [number * shared for number in original]
    changed = list(arguments)
    changes = []
    for position, number, new in zip(positions, original, values):
        changed[position] = new
        changes.append({"position": position, "original": number, "changed": new})
    return changed, changes


def build_with_changed_constants(module, init_seed: int, device: str, mode: str, perturb: bool, gains: dict | None,
                                 arguments: list, state: dict):
    """The reference built as ``build_reference_model`` builds it, from ``arguments`` with
    their floating-point numbers changed (``changed_constants``): (model, the changed
    arguments, the changes), or None where there is nothing to change, where Model refuses
    the other values, or where its state dict no longer has the names and shapes of
    ``state`` (the number was a size). Both processes of a verification build it, under the
    same seed: the weights of a Model whose initialization does not read the numbers are
    those of ``state``."""
    changed, changes = changed_constants(arguments, init_seed)
    if not changes:
        return None
    try:
        model, _ = build_reference_model(module, init_seed, device, mode, perturb, gains, changed)
    except Exception:
        return None
    own = model.state_dict()
    if set(own) != set(state) or any(tuple(own[name].shape) != tuple(state[name].shape) for name in own
                                     if isinstance(own[name], torch.Tensor)):
        return None
    return model, changed, changes


# ---------------------------------------------------------------------------------------
# Input distributions

#: The stress distributions, in the order the audit tries them. Each reshapes the task's
#: own floating-point inputs (``get_inputs()`` under the set's seed) at their own scale:
#:   sign_symmetric  standard normal values times the inputs' root mean square (negative
#:                   values where the task draws only positive ones, as torch.rand does);
#:   shifted         the inputs moved by 3 to 6 standard deviations plus their mean, in a
#:                   random direction;
#:   heavy_tailed    a normal scale mixture (kurtosis far above the normal's) with one
#:                   element in 512 sixteen times larger, and one in 2^20 (two at least,
#:                   of opposite signs) 1024 times the inputs' scale: a few elements carry
#:                   much of a sum, so statistics taken from a sample of the elements miss
#:                   them, and an exponential without its max shift overflows (a variance
#:                   from every 16th of 4 M elements misses the four largest three times in
#:                   four, and with them a third of the variance). Along every dimension,
#:                   each index also adds the inputs' scale times the power of two that
#:                   divides it (its trailing zero bits, less their mean): a sample of every
#:                   2^k-th element along any dimension is off by k times the scale (a mean
#:                   from every 16th element of a row by four, where a random sample of 4 M
#:                   elements is off by 0.002);
#:   structured      values whose scale (0.14 to 7.4 times), sign and offset change from
#:                   block to block of consecutive elements (one block length per input,
#:                   1 to 63), plus an offset per index along every dimension (rows,
#:                   columns and channels differ): not identically distributed across
#:                   positions.
#: ``positive`` folds a distribution onto the positive half-line (absolute values, shifts
#: upwards), for references whose domain is positive (log, sqrt, a probability).
STRESS_KINDS = ("sign_symmetric", "shifted", "heavy_tailed", "structured")
#: The rare largest elements of heavy-tailed inputs, in multiples of the inputs' scale.
HEAVY_TAIL_SPIKE = 1024.0
#: A heavy-tailed set may name a smaller ``spike``: every element is then held within that
#: many times the inputs' scale. The audit falls back on it where the full tail leaves the
#: reference's domain (an exponential of 1024 times the scale overflows), so that such a
#: task still gets inputs whose few large elements carry much of a sum.
MILD_HEAVY_TAIL_SPIKE = 8.0


class DistributionError(ValueError):
    """A distribution specification that is not well formed."""


#: A set that is another set's inputs with a few elements moved (``near_repeat_inputs``).
NEAR_REPEAT = "near_repeat"
#: One element in this many of each floating-point input changes in a near repeat.
NEAR_REPEAT_ELEMENTS = 4096

#: A set that is the task's own inputs with a single element of each floating-point input
#: taken from a stress distribution (``sparse_inputs``): {"kind": SPARSE, "stress": a
#: stress distribution}. A kernel that tests a sample of its inputs for a property of the
#: task's own (no negative value) and takes a shortcut when the sample has it passes the
#: stress sets, where its sample sees the property fail and it computes, and the task's own
#: sets, where the shortcut is right; one stress element among the task's own values, where
#: the sample does not look, makes the shortcut wrong there.
SPARSE = "sparse"
#: Elements of each floating-point input a sparse set takes from its stress distribution.
#: One, because a sample of a fraction f of the elements misses each of them with
#: probability 1 - f only: every further element is a further chance for the sample to see
#: one and for the kernel to compute (at one in 4096 of 16 M elements, a sample of every
#: 64th element would see 64 of them).
SPARSE_ELEMENTS = 1
#: The element is chosen among this many positions drawn at random: the one whose stress
#: value has the sign opposite to the task's own there (a sign is what most shortcuts test:
#: a ReLU or an absolute value of inputs that torch.rand never draws negative), and of those
#: the one farthest from the task's own value, so that it shows beyond any tolerance.
SPARSE_CANDIDATES = 64
#: Positions a sample of the elements takes most often are left out, so that it misses the
#: stress element whatever the seed: the first and the last 1/SPARSE_MARGIN of the elements
#: (a prefix, the first row, the last ones) and every index divisible by SPARSE_STRIDE (every
#: n-th element for n a multiple of it, the first element of each row of such a length).
#: Inputs of fewer than SPARSE_MARGIN * SPARSE_STRIDE elements draw from all positions.
SPARSE_MARGIN = 8
SPARSE_STRIDE = 8


#: A set that is the task's own inputs with its floating-point numbers negated: {"kind":
#: NEGATED_SCALARS}. Numbers among the inputs are otherwise scaled by factors below one
#: (``scalar_factor``) and keep their sign, which lets a kernel move a positive factor past a
#: maximum or a ReLU. The audit adds it where the task has such a number and the reference
#: stays in its domain.
NEGATED_SCALARS = "negated_scalars"
#: A set that is the task's own inputs with whole slices of each floating-point input of two
#: or more dimensions made zero (``flat_inputs``): {"kind": FLAT}. A normalization whose
#: statistics run over such a slice sees a variance and a mean square of zero there, where
#: the reference's epsilon keeps the output finite (it is the bias) and a kernel that leaves
#: the epsilon out divides zero by zero. The audit adds it to tasks whose
#: reference normalizes (``verify.audit.NORMALIZATIONS``).
FLAT = "flat"
#: A set that is the task's own inputs with every integer among them one larger: {"kind":
#: SHIFTED_INTEGERS}. Integers are otherwise the same in every set (most are sizes and
#: counts), which lets a kernel hard-code one that is an operand (an exponent, an index).
#: The audit adds it where the reference's outputs keep their shapes and stay finite there:
#: an integer that changes them is a size.
SHIFTED_INTEGERS = "shifted_integers"
#: A set that is the task's own inputs with some elements of every integer tensor replaced
#: by a value the reference's operators give a meaning of their own (the ``ignore_index`` of
#: a cross entropy, -100 by default): {"kind": INTEGER_SENTINELS, "value": int}. Integer
#: tensors are otherwise drawn as the task draws them, which never holds such a value.
INTEGER_SENTINELS = "integer_sentinels"
#: One element in this many of each integer tensor holds the sentinel (one at least).
SENTINEL_ELEMENTS = 16
#: In a dense sentinel set ({"kind": INTEGER_SENTINELS, "value": int, "dense": True}) every
#: element of each integer tensor but this many (fewer where it has fewer) holds it. A loss
#: that averages over the targets it does not ignore moves by a part in 512 when one target
#: in 16 is ignored, far inside the tolerance: a kernel that counts ignored targets as some
#: class passes such a set. With two targets left, whatever the batch, the average is theirs.
DENSE_SENTINEL_KEPT = 2


def check_distribution(spec) -> dict | None:
    """``spec`` as a distribution ({"kind": one of STRESS_KINDS, "positive": bool},
    {"kind": NEAR_REPEAT, "base": [seed, scale, distribution]} or {"kind": SPARSE, "stress":
    a distribution of STRESS_KINDS}), or None for the task's own inputs; raises
    DistributionError otherwise."""
    if spec is None:
        return None
    if isinstance(spec, dict) and spec.get("kind") == NEAR_REPEAT:
        base = spec.get("base")
        if not isinstance(base, (list, tuple)) or len(base) != 3:
            raise DistributionError(f"a near repeat names its base set as [seed, scale, distribution], not {base!r}")
        inner = check_distribution(base[2])
        if inner is not None and inner["kind"] == NEAR_REPEAT:
            raise DistributionError("a near repeat's base set cannot be a near repeat itself")
        return {"kind": NEAR_REPEAT, "base": [int(base[0]), float(base[1]), inner]}
    if isinstance(spec, dict) and spec.get("kind") == SPARSE:
        stress = spec.get("stress")
        if not isinstance(stress, dict) or stress.get("kind") not in STRESS_KINDS:
            raise DistributionError(f"a sparse set takes its elements from a distribution of {', '.join(STRESS_KINDS)},"
                                    f" not {stress!r}")
        return {"kind": SPARSE, "stress": check_distribution(stress)}
    if isinstance(spec, dict) and spec.get("kind") in (FLAT, NEGATED_SCALARS, SHIFTED_INTEGERS):
        return {"kind": spec["kind"]}
    if isinstance(spec, dict) and spec.get("kind") == INTEGER_SENTINELS:
        if type(spec.get("value")) is not int:
            raise DistributionError(f"an integer sentinel set names its value as an integer, not {spec.get('value')!r}")
        return {"kind": INTEGER_SENTINELS, "value": spec["value"], **({"dense": True} if spec.get("dense") else {})}
    if not isinstance(spec, dict) or spec.get("kind") not in STRESS_KINDS:
        raise DistributionError(f"unknown input distribution {spec!r}; expected one of"
                                f" {', '.join(STRESS_KINDS + (SPARSE, NEAR_REPEAT, FLAT, NEGATED_SCALARS))},"
                                f" {SHIFTED_INTEGERS}, {INTEGER_SENTINELS}")
    checked = {"kind": spec["kind"], "positive": bool(spec.get("positive", False))}
    if spec["kind"] == "heavy_tailed" and spec.get("spike") is not None:
        spike = spec["spike"]
        if isinstance(spike, bool) or not isinstance(spike, (int, float)) or not 1.0 <= float(spike) <= HEAVY_TAIL_SPIKE:
            raise DistributionError(f"a heavy-tailed set's spike is a number from 1 to {HEAVY_TAIL_SPIKE:g}, not {spike!r}")
        checked["spike"] = float(spike)
    return checked


def describe_distribution(spec: dict | None) -> str:
    if spec is None:
        return "the task's own inputs"
    if spec["kind"] == NEAR_REPEAT:
        return (f"a near repeat: another set's inputs with one element in {NEAR_REPEAT_ELEMENTS} moved and as many"
                " consecutive ones copied")
    if spec["kind"] == NEGATED_SCALARS:
        return "the task's own inputs with their floating-point numbers negated"
    if spec["kind"] == FLAT:
        return "the task's own inputs with a sample and a channel of zeros"
    if spec["kind"] == SHIFTED_INTEGERS:
        return "the task's own inputs with every integer among them one larger"
    if spec["kind"] == INTEGER_SENTINELS:
        if spec.get("dense"):
            return (f"the task's own inputs with every element of each integer tensor {spec['value']} but"
                    f" {DENSE_SENTINEL_KEPT}")
        return f"the task's own inputs with one element in {SENTINEL_ELEMENTS} of each integer tensor {spec['value']}"
    if spec["kind"] == "heavy_tailed" and spec.get("spike") is not None:
        return (f"heavy-tailed stress inputs{' (positive)' if spec.get('positive') else ''} held to"
                f" {spec['spike']:g} times the inputs' scale")
    if spec["kind"] == SPARSE:
        return (f"the task's own inputs with {'one element' if SPARSE_ELEMENTS == 1 else f'{SPARSE_ELEMENTS} elements'}"
                f" of each floating-point input taken from {describe_distribution(spec['stress'])}")
    return spec["kind"].replace("_", "-") + (" (positive)" if spec.get("positive") else "") + " stress inputs"


def _normal(shape, generator: torch.Generator, device) -> torch.Tensor:
    return torch.randn(shape, generator=generator, device=device, dtype=torch.float32)


def _uniform01(shape, generator: torch.Generator, device) -> torch.Tensor:
    return torch.rand(shape, generator=generator, device=device, dtype=torch.float32)


def _power_of_two_offsets(extent: int, device) -> torch.Tensor:
    """Per index 0..extent-1: the number of trailing zero bits of the index (index 0 counts
    as divisible by every power of two below ``extent``), less their mean."""
    index = torch.arange(extent, device=device, dtype=torch.int64)
    zeros = torch.zeros(extent, device=device, dtype=torch.float32)
    for bit in range(1, max(1, (extent - 1).bit_length())):
        zeros += ((index % (1 << bit)) == 0).to(torch.float32)
    return zeros.sub_(zeros.mean())


def reshape_distribution(value: torch.Tensor, spec: dict, seed: int, position: int) -> torch.Tensor:
    """The floating-point input ``value`` (the task's own draw) under distribution ``spec``,
    from a generator seeded by the set's seed and the input's position. Drawn chunk by
    chunk into one float32 tensor the size of the input, so that inputs of billions of
    elements need no more than that beside them."""
    device = value.device
    generator = _generator(device, _derived_seed("inputs", seed, position, spec["kind"], spec["positive"]))
    mean, deviation, scale = _moments(value)
    scale = scale or 1.0
    shape = value.shape
    kind = spec["kind"]
    spike = float(spec.get("spike") or HEAVY_TAIL_SPIKE)
    if kind == "shifted":
        coin, spread = _uniform01((2,), generator, device).tolist()
        direction = 1.0 if spec["positive"] or coin < 0.5 else -1.0
        result = value.to(torch.float32, copy=True).add_(direction * (abs(mean) + 3 * (deviation or scale)) * (1 + spread))
        return result.to(value.dtype)
    result = torch.empty(shape, device=device, dtype=torch.float32)
    flat = result.view(-1)
    count = flat.numel()
    # Structured inputs change from block to block; a chunk holds whole blocks.
    length = 1 + int(_uniform01((), generator, device) * 63) if kind == "structured" else 1
    step = max(length, _CHUNK // length * length)
    for start in range(0, count, step):
        part = flat[start:start + step]
        if kind == "sign_symmetric":
            part.copy_(_normal(part.shape, generator, device)).mul_(scale)
        elif kind == "heavy_tailed":
            part.copy_(_normal(part.shape, generator, device)).mul_(0.8).exp_()
            part.mul_(_normal(part.shape, generator, device)).mul_(scale / 1.9)
            part[_uniform01(part.shape, generator, device) < (1.0 / 512.0)] *= 16.0
            if spike < HEAVY_TAIL_SPIKE:
                part.clamp_(-spike * scale, spike * scale)
        else:
            part.copy_(_normal(part.shape, generator, device)).mul_(scale)
            blocks = -(-part.numel() // length)
            block_scale = _uniform01((blocks,), generator, device).mul_(4).sub_(2).exp_()
            block_scale.mul_(torch.where(_uniform01((blocks,), generator, device) < 0.5, -1.0, 1.0))
            block_offset = _normal((blocks,), generator, device).mul_(0.5 * scale)
            whole = part.numel() // length * length
            if whole:
                grid = part[:whole].view(-1, length)
                grid.mul_(block_scale[:whole // length, None]).add_(block_offset[:whole // length, None])
            if whole < part.numel():
                part[whole:].mul_(block_scale[-1]).add_(block_offset[-1])
    if kind == "heavy_tailed":
        for dimension, extent in enumerate(shape):
            if extent > 1:
                view = [1] * len(shape)
                view[dimension] = extent
                result.add_(_power_of_two_offsets(extent, device).mul_(scale).reshape(view))
    if kind == "heavy_tailed" and count:
        # Spikes of both signs (where there are two elements): a softmax or a log-sum-exp
        # without its max shift overflows on the positive one, a kernel that assumes a sign
        # meets the other, every time rather than on half the sets.
        spikes = min(count, max(2, count >> 20))
        places = torch.randint(0, count, (spikes,), generator=generator, device=device)
        if spikes > 1:  # the two signs in two places
            places[1] = torch.where(places[1] == places[0], (places[0] + 1) % count, places[1])
        signs = torch.where(torch.arange(spikes, device=device) % 2 == 0, 1.0, -1.0)
        flat[places] = signs.mul_(spike * scale)
    if kind == "structured":
        for dimension, extent in enumerate(shape):
            if extent > 1:
                offsets = _normal((extent,), generator, device).mul_(scale)
                view = [1] * len(shape)
                view[dimension] = extent
                result.add_(offsets.reshape(view))
    if spec["positive"]:
        result.abs_()
    return result.to(value.dtype)


#: Floating-point numbers among a set's inputs are scaled by a factor in this range (below
#: one, so that a probability or a fraction stays in its domain).
SCALAR_FACTOR_RANGE = (0.5, 0.9)


def scalar_factor(seed: int, position: int) -> float:
    """The factor for the floating-point number at ``position`` of the input set of ``seed``."""
    low, high = SCALAR_FACTOR_RANGE
    return low + (high - low) * (_derived_seed("scalar", seed, position) / float(1 << 63))


def generate_inputs(module, seed: int, scale: float, device: str, distribution: dict | None = None) -> list:
    """One input set: ``get_inputs()`` under ``seed``, created on ``device``; floating-point
    tensors are reshaped to ``distribution`` (``reshape_distribution``, ``sparse_inputs``
    or ``near_repeat_inputs``; None keeps the task's own) and multiplied by ``scale``
    (stress sets that leave the default distribution, for clamps that standard-normal
    inputs never reach); floating-point numbers are scaled by ``scalar_factor``."""
    distribution = check_distribution(distribution)
    if distribution is not None and distribution["kind"] == NEAR_REPEAT:
        base_seed, base_scale, base_distribution = distribution["base"]
        return near_repeat_inputs(generate_inputs(module, base_seed, base_scale, device, base_distribution), seed)
    seed_everything(seed)
    with torch.device(device):
        values = module.get_inputs()
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    result = []
    for position, value in enumerate(values):
        if isinstance(value, torch.Tensor):
            value = value.to(device)
            if value.dtype.is_floating_point:
                if distribution is not None and distribution["kind"] == SPARSE:
                    value = sparse_inputs(value, distribution["stress"], seed, position)
                elif distribution is not None and distribution["kind"] == FLAT:
                    value = flat_inputs(value, seed, position)
                elif distribution is not None and distribution["kind"] in (NEGATED_SCALARS, SHIFTED_INTEGERS,
                                                                            INTEGER_SENTINELS):
                    pass  # the floating-point tensors are the task's own
                elif distribution is not None:
                    value = reshape_distribution(value, distribution, seed, position)
                if scale != 1.0:
                    value = value * scale
            elif (distribution is not None and distribution["kind"] == INTEGER_SENTINELS and value.numel()
                  and not value.dtype.is_complex and value.dtype != torch.bool):
                value = sentinel_inputs(value, distribution["value"], seed, position, distribution.get("dense", False))
            value = value.contiguous() if not value.is_contiguous() else value
        elif type(value) is int and distribution is not None and distribution["kind"] == SHIFTED_INTEGERS:
            value = value + 1
        elif type(value) is float and math.isfinite(value) and value != 0.0:
            # A number among the inputs is an input too: it changes from set to set, so a
            # kernel that hard-codes get_inputs()'s constant is wrong (integers stay: they
            # are sizes and counts).
            value = value * scalar_factor(seed, position)
            if distribution is not None and distribution["kind"] == NEGATED_SCALARS:
                value = -value
        result.append(value)
    return result


def sentinel_inputs(value: torch.Tensor, sentinel: int, seed: int, position: int, dense: bool = False) -> torch.Tensor:
    """The integer input ``value`` (the task's own draw) with one element in
    SENTINEL_ELEMENTS (one at least) set to ``sentinel``, at positions drawn from the set's
    seed and the input's position; ``dense``: every element but DENSE_SENTINEL_KEPT set to
    it, the ones kept drawn alike."""
    generator = _generator(value.device, _derived_seed("sentinel", seed, position, *(("dense",) if dense else ())))
    result = value.clone(memory_format=torch.contiguous_format)
    if dense:
        count = min(DENSE_SENTINEL_KEPT, value.numel() - 1)
        kept = torch.randperm(value.numel(), generator=generator, device=value.device)[:count]
        flat = result.view(-1)
        original = flat[kept].clone()
        flat.fill_(sentinel)
        flat[kept] = original
        return result
    count = max(1, value.numel() // SENTINEL_ELEMENTS)
    places = torch.unique(torch.randint(value.numel(), (count,), generator=generator, device=value.device))
    result.view(-1)[places] = sentinel
    return result


def flat_inputs(value: torch.Tensor, seed: int, position: int) -> torch.Tensor:
    """The floating-point input ``value`` (the task's own draw) with one index along its
    first dimension (a sample) and one along its second (a channel or a feature, in every
    sample) made zero, at indices drawn from the set's seed and the input's position: a
    layer, group, instance or RMS norm over the sample, and a batch norm over the channel,
    divide by their epsilon alone there, in the reference as in a correct kernel (whose
    statistics of zeros are exact). Inputs of fewer than two dimensions stay as they are."""
    if value.dim() < 2 or value.numel() == 0:
        return value
    generator = _generator(value.device, _derived_seed("flat", seed, position))
    sample, channel = (int(_uniform01((), generator, value.device) * extent) for extent in value.shape[:2])
    result = value.clone(memory_format=torch.contiguous_format)
    result[sample] = 0.0
    result[:, channel] = 0.0
    return result


def sparse_inputs(value: torch.Tensor, stress: dict, seed: int, position: int) -> torch.Tensor:
    """The floating-point input ``value`` (the task's own draw) with SPARSE_ELEMENTS of its
    elements replaced by those of the stress distribution ``stress`` at the same positions
    (the stress set of ``seed`` has them there too). The positions come from a generator
    seeded by the set's seed and the input's position: among SPARSE_CANDIDATES positions
    drawn off the ones a sample takes most often (SPARSE_MARGIN, SPARSE_STRIDE), those whose
    stress value has the sign opposite to the task's own come first, and among them the ones
    farthest from it."""
    drawn = reshape_distribution(value, stress, seed, position)
    count = value.numel()
    if count <= SPARSE_ELEMENTS:
        return drawn
    device = value.device
    generator = _generator(device, _derived_seed("sparse", seed, position))
    if count >= SPARSE_MARGIN * SPARSE_STRIDE:
        # Blocks of SPARSE_STRIDE elements inside the margins, and an offset other than 0 in one.
        first_block = -(-count // SPARSE_MARGIN // SPARSE_STRIDE)
        end_block = (count - count // SPARSE_MARGIN) // SPARSE_STRIDE
        blocks = torch.randint(first_block, end_block, (SPARSE_CANDIDATES,), generator=generator, device=device)
        offsets = torch.randint(1, SPARSE_STRIDE, (SPARSE_CANDIDATES,), generator=generator, device=device)
        candidates = blocks * SPARSE_STRIDE + offsets
    else:
        candidates = torch.randint(count, (SPARSE_CANDIDATES,), generator=generator, device=device)
    stress_flat = drawn.reshape(-1)
    own, new = value.reshape(-1)[candidates].double(), stress_flat[candidates].double()
    gap = (new - own).abs()
    opposite = (own < 0) != (new < 0)
    order = torch.argsort(opposite.double() * (float(gap.max()) + 1) + gap, descending=True, stable=True)
    chosen: list[int] = []
    for index in candidates[order].tolist():
        if index not in chosen:
            chosen.append(index)
        if len(chosen) == SPARSE_ELEMENTS:
            break
    places = torch.tensor(chosen, device=device, dtype=torch.int64)
    replacements = stress_flat[places].clone()
    del drawn, stress_flat  # the stress draw is as large as the input: gone before the copy
    # A copy: get_inputs may hand out a tensor it keeps (a module-level constant).
    result = value.clone(memory_format=torch.contiguous_format)
    result.view(-1)[places] = replacements
    return result


def near_repeat_inputs(values: list, seed: int) -> list:
    """``values`` with one element in NEAR_REPEAT_ELEMENTS of each floating-point tensor
    replaced by another element of the same tensor, and a run of as many consecutive
    elements copied from another place (positions drawn from ``seed``): inputs that agree
    with another set almost everywhere and stay in its domain, so a result cached under a
    sample of the elements, scattered or contiguous (a prefix, a row), is wrong at the ones
    that moved."""
    for position, value in enumerate(values):
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point and value.numel() > 1:
            flat = value.view(-1)
            generator = _generator(value.device, _derived_seed("near-repeat", seed, position))
            count = max(1, flat.numel() // NEAR_REPEAT_ELEMENTS)
            # Distinct targets: a scatter to one position twice keeps either value on a GPU,
            # and both processes must build the same inputs.
            targets = torch.unique(torch.randint(flat.numel(), (count,), generator=generator, device=value.device))
            sources = torch.randint(flat.numel(), (count,), generator=generator, device=value.device)[:targets.numel()]
            flat[targets] = flat[sources].clone()
            # And a run of as many consecutive elements copied from elsewhere: a result
            # cached under a sample that misses the run (a prefix, a row, scattered
            # elements) is wrong over the whole run, not only at a few scattered elements.
            run = min(count, flat.numel() // 2)
            starts = flat.numel() - run + 1
            source, shift = torch.randint(starts, (2,), generator=generator, device=value.device).tolist()
            target = (source + 1 + shift % (starts - 1)) % starts
            flat[target:target + run] = flat[source:source + run].clone()
    return values


def fingerprint(values) -> str:
    """A cheap digest of tensors (shape, dtype and up to 4096 evenly spaced elements)."""
    digest = hashlib.sha256()
    for value in values:
        if isinstance(value, torch.Tensor):
            digest.update(f"{tuple(value.shape)}{value.dtype}".encode())
            flat = value.detach().reshape(-1)
            if flat.numel():
                step = max(1, flat.numel() // 4096)
                sample = flat[::step][:4096]
                if sample.dtype in (torch.bfloat16, torch.float16) or sample.dtype.is_complex:
                    sample = sample.to(torch.complex128 if sample.dtype.is_complex else torch.float64)
                digest.update(sample.cpu().contiguous().view(torch.uint8).numpy().tobytes()
                              if _numpy() else str(sample.cpu().tolist()).encode())
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()[:32]


def _numpy() -> bool:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def state_fingerprint(state: dict) -> str:
    return fingerprint([state[name] for name in sorted(state)])


def signature_parameters(cls) -> list[str]:
    import inspect

    try:
        parameters = list(inspect.signature(cls.__init__).parameters.values())
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters[1:] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

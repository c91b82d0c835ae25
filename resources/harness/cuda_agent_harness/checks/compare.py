# SPDX-License-Identifier: Apache-2.0
"""Comparison of a candidate's outputs with the reference's, run by the trusted process
that computed the reference. Every failure names a reason code and says, in words a model
can act on, what differs and where."""

from __future__ import annotations

import math

import torch

#: How the absolute part of a tolerance follows the reference output's magnitude:
#: atol_effective = atol x min(ceiling, max(floor, RMS)), where RMS is the root mean square
#: of the reference output's finite elements (one value per output tensor and input set).
#: Outputs of order 1 and larger keep atol as given; smaller ones get a proportionally
#: smaller one, so that an output of values around 1e-4 is not matched by zeros within an
#: atol of 1e-2. The floor keeps outputs that are (nearly) all zeros comparable.
ATOL_SCALE = {"statistic": "rms", "floor": 1e-5, "ceiling": 1.0}
#: The paper's tolerance (CUDA-Agent and KernelBench before v0.1): atol = rtol = 1e-2.
PAPER = {"default": {"atol": 1e-2, "rtol": 1e-2}, "atol_scale": ATOL_SCALE}
#: KernelBench's current tolerance: fp32 (and fp64) 1e-4, half precision 1e-2.
STRICT = {"default": {"atol": 1e-4, "rtol": 1e-4},
          "float16": {"atol": 1e-2, "rtol": 1e-2}, "bfloat16": {"atol": 1e-2, "rtol": 1e-2},
          "atol_scale": ATOL_SCALE}

#: The byte the candidate process writes into free memory before each call.
POISON_BYTE = 0xFF


class Failure(Exception):
    """A check that did not pass."""

    def __init__(self, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.details = details or {}

    def as_dict(self) -> dict:
        return {"reason": self.reason, "message": self.message, "details": self.details}


def tolerance_for(policy: dict, dtype: torch.dtype) -> dict:
    name = str(dtype).replace("torch.", "")
    if dtype.is_complex:
        name = {"complex64": "float32", "complex128": "float64"}.get(name, name)
    chosen = policy.get(name) or policy.get("default") or PAPER["default"]
    return {"atol": float(chosen["atol"]), "rtol": float(chosen["rtol"])}


def magnitude(tensor: torch.Tensor) -> float:
    """The root mean square of ``tensor``'s finite elements (of their absolute values for
    complex tensors), accumulated in float64 chunk by chunk; 0 for an empty tensor or one
    without finite elements."""
    flat = tensor.detach().reshape(-1)
    squares, count = 0.0, 0
    for start in range(0, flat.numel(), CHUNK):
        chunk = flat[start:start + CHUNK]
        chunk = chunk.abs() if chunk.dtype.is_complex else chunk
        chunk = chunk.to(torch.float64)
        finite = torch.isfinite(chunk)
        squares += float(torch.where(finite, chunk, torch.zeros((), dtype=chunk.dtype, device=chunk.device)).square().sum())
        count += int(finite.sum())
    return math.sqrt(squares / count) if count else 0.0


def effective_tolerance(policy: dict, expected: torch.Tensor, typical: float | None = None) -> dict:
    """The tolerance that ``expected`` (a reference output) is compared with: the dtype's
    atol and rtol from ``policy``, the atol scaled as ``policy["atol_scale"]`` says (see
    ATOL_SCALE; a policy without it keeps atol as given). ``typical``: the output's
    ``magnitude`` when it is known already. The result also says how atol was obtained
    (``atol_base``, ``magnitude``, ``atol_factor``), for messages."""
    base = tolerance_for(policy, expected.dtype)
    scaling = policy.get("atol_scale")
    if not scaling or not (expected.dtype.is_floating_point or expected.dtype.is_complex):
        return base
    typical = magnitude(expected) if typical is None else typical
    factor = min(float(scaling.get("ceiling", 1.0)), max(float(scaling.get("floor", 0.0)), typical))
    return {"atol": base["atol"] * factor, "rtol": base["rtol"], "atol_base": base["atol"], "magnitude": typical,
            "atol_factor": factor}


def describe_atol(tolerance: dict) -> str:
    """'atol 1e-2' or 'atol 1e-2 x 0.0123 (the RMS of the reference output) = 0.000123'."""
    if "atol_factor" not in tolerance or tolerance["atol_factor"] == 1.0:
        return f"atol {tolerance.get('atol_base', tolerance['atol']):g}"
    return (f"atol {tolerance['atol_base']:g} x {tolerance['atol_factor']:.3g} (the root mean square of the reference"
            f" output) = {tolerance['atol']:.3g}")


def label(path: list) -> str:
    """'the output' for a lone tensor, 'output[1][0]' inside sequences."""
    if not path:
        return "the output"
    return "output" + "".join(f"[{index}]" for index in path)


def unravel(flat: int, shape: tuple) -> tuple:
    index = []
    for extent in reversed(shape):
        index.append(flat % extent if extent else 0)
        flat = flat // extent if extent else 0
    return tuple(reversed(index))


def _format_index(index: tuple) -> str:
    return "(" + ", ".join(str(i) for i in index) + ")" if len(index) != 1 else f"({index[0]})"


def _format_value(value) -> str:
    if isinstance(value, complex):
        return f"{value.real:.6g}{value.imag:+.6g}j"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.8g}"
    return str(value)


def _item(tensor: torch.Tensor, flat: int):
    return tensor.reshape(-1)[flat].item()


def compare_structure(expected: dict, actual: dict, path: list | None = None) -> None:
    """Checks that ``actual`` has the structure and types of ``expected`` (descriptions)."""
    path = [] if path is None else path
    where = label(path)
    if expected["kind"] == "sequence":
        if actual["kind"] != "sequence":
            raise Failure("output_structure",
                          f"{where} should be a {expected['type']} of {len(expected['items'])} items like the reference's,"
                          f" but ModelNew returned {_what(actual)}.",
                          {"path": path, "expected": expected["type"], "actual": actual["type"]})
        if actual["type"] != expected["type"]:
            raise Failure("output_type",
                          f"{where} is a {actual['type']} but the reference returns a {expected['type']}; return the"
                          f" same container type.", {"path": path, "expected": expected["type"], "actual": actual["type"]})
        if len(actual["items"]) != len(expected["items"]):
            raise Failure("output_structure",
                          f"{where} has {len(actual['items'])} items but the reference returns {len(expected['items'])}.",
                          {"path": path, "expected": len(expected["items"]), "actual": len(actual["items"])})
        for index, (want, got) in enumerate(zip(expected["items"], actual["items"])):
            compare_structure(want, got, path + [index])
        return
    if expected["kind"] == "tensor":
        if actual["kind"] == "sequence":
            raise Failure("output_structure",
                          f"{where} should be one tensor like the reference's, but ModelNew returned a {actual['type']}"
                          f" of {len(actual['items'])} items.", {"path": path})
        if actual["kind"] != "tensor" or actual["type"] != "torch.Tensor":
            raise Failure("output_type",
                          f"{where} must be exactly a torch.Tensor, but ModelNew returned {_what(actual)}. Return plain"
                          " tensors (no subclasses, wrappers, numpy arrays or Python numbers).",
                          {"path": path, "actual": actual["type"]})
        if actual.get("overrides"):
            names = ", ".join(actual["overrides"])
            raise Failure("output_type",
                          f"{where} carries per-instance methods ({names}) that replace torch.Tensor's own; return"
                          " plain tensors.", {"path": path, "overrides": actual["overrides"]})
        if actual.get("unreadable"):
            raise Failure("output_type",
                          f"{where} has layout {actual.get('layout')} on device {actual.get('device')} and dtype"
                          f" {actual.get('dtype')}; return a dense (strided) tensor.", {"path": path})
        if list(actual["shape"]) != list(expected["shape"]):
            raise Failure("shape_mismatch",
                          f"{where} has shape {tuple(actual['shape'])} but the reference's has shape"
                          f" {tuple(expected['shape'])}.",
                          {"path": path, "expected": expected["shape"], "actual": actual["shape"]})
        if actual["dtype"] != expected["dtype"]:
            raise Failure("dtype_mismatch",
                          f"{where} has dtype {actual['dtype']} but the reference's has dtype {expected['dtype']};"
                          " convert to the reference's dtype.",
                          {"path": path, "expected": expected["dtype"], "actual": actual["dtype"]})
        if _device_type(actual["device"]) != _device_type(expected["device"]):
            raise Failure("device_mismatch",
                          f"{where} is on device {actual['device']} but the reference's is on {expected['device']};"
                          " keep outputs on the device of the inputs.",
                          {"path": path, "expected": expected["device"], "actual": actual["device"]})
        return
    # The reference returned a Python scalar or something else; demand the same.
    if actual["kind"] != expected["kind"] or actual["type"] != expected["type"]:
        raise Failure("output_type",
                      f"{where} should be {_what(expected)} like the reference's, but ModelNew returned {_what(actual)}.",
                      {"path": path, "expected": expected["type"], "actual": actual["type"]})
    if expected["kind"] == "scalar" and not _scalars_equal(expected.get("value"), actual.get("value")):
        raise Failure("value_mismatch",
                      f"{where} is {actual.get('value')!r} but the reference returns {expected.get('value')!r}.",
                      {"path": path, "expected": expected.get("value"), "actual": actual.get("value")})


def _scalars_equal(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _device_type(device: str) -> str:
    return device.split(":", 1)[0]


def _what(description: dict) -> str:
    kind = description["kind"]
    if kind == "tensor":
        return "a tensor" if description["type"] == "torch.Tensor" else f"a {description['type']}"
    if kind == "sequence":
        return f"a {description['type']} of {len(description['items'])} items"
    if kind == "scalar":
        return f"a Python {description['type']} ({description.get('value')!r})"
    return f"an object of type {description['type']}"


#: Elements compared at a time: bounds the temporaries of a comparison (outputs of large
#: tasks hold billions of elements).
CHUNK = 1 << 24


def _working_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype.is_complex:
        return torch.complex128 if dtype == torch.complex128 else torch.complex64
    return torch.float64 if dtype == torch.float64 else torch.float32


def compare_tensor(expected: torch.Tensor, actual: torch.Tensor, tolerance: dict, where: str,
                   written_before: bool = False, device: torch.device | str | None = None) -> dict:
    """Compares values; raises Failure (non_finite or value_mismatch) with the first
    differing index, or returns error statistics. Works through the tensors in chunks on
    ``device`` (by default the expected tensor's: an expected output kept in host memory is
    compared on the GPU a chunk at a time). ``tolerance`` is ``tolerance_for``'s or
    ``effective_tolerance``'s. ``written_before``: an earlier call on the same inputs gave
    the right output, so poison found now is not "never written" but a call that skipped
    writing this time."""
    shape = tuple(expected.shape)
    total = expected.numel()
    if total == 0:
        return {"max_abs_error": 0.0, "max_rel_error": 0.0, "elements": 0}
    e_flat = expected.reshape(-1)
    a_flat = actual.reshape(-1)
    atol, rtol = tolerance["atol"], tolerance["rtol"]
    floating = expected.dtype.is_floating_point or expected.dtype.is_complex
    work = _working_dtype(expected.dtype) if floating else None
    max_abs = max_rel = 0.0
    worst = 0
    first_broken = first_wrong = None
    broken_count = nan_count = wrong_count = 0
    on = expected.device if device is None else torch.device(device)
    for start in range(0, total, CHUNK):
        e = e_flat[start:start + CHUNK].to(on)
        a = a_flat[start:start + CHUNK].to(on)
        if not floating:
            wrong = a != e
            count = int(wrong.sum())
            if count:
                wrong_count += count
                if first_wrong is None:
                    first_wrong = start + int(wrong.to(torch.int8).argmax())
            continue
        e = e.to(work)
        a = a.to(work)
        e_finite = torch.isfinite(e)
        a_finite = torch.isfinite(a)
        broken = e_finite & ~a_finite
        count = int(broken.sum())
        if count:
            broken_count += count
            nan_count += int((broken & torch.isnan(a)).sum())
            if first_broken is None:
                first_broken = start + int(broken.to(torch.int8).argmax())
        wrong = ~torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
        count = int(wrong.sum())
        if count:
            wrong_count += count
            if first_wrong is None:
                first_wrong = start + int(wrong.to(torch.int8).argmax())
        difference = torch.where(e_finite & a_finite, (a - e).abs(), torch.zeros((), dtype=work, device=e.device))
        if difference.dtype.is_complex:
            difference = difference.real
        magnitude = e.abs().real if e.dtype.is_complex else e.abs()
        chunk_worst = int(difference.argmax())
        chunk_max = float(difference[chunk_worst])
        if chunk_max > max_abs:
            max_abs, worst = chunk_max, start + chunk_worst
        # Relative to at least atol: near zero a relative error says nothing.
        max_rel = max(max_rel, float((difference / magnitude.clamp_min(max(atol, 1e-30))).max()))
    if not floating:
        if first_wrong is None:
            return {"max_abs_error": 0.0, "max_rel_error": 0.0, "elements": total}
        index = unravel(first_wrong, shape)
        raise Failure("value_mismatch",
                      f"{where} differs from the reference at index {_format_index(index)} (shape {shape}): expected"
                      f" {_format_value(_item(expected, first_wrong))}, got {_format_value(_item(actual, first_wrong))};"
                      f" {wrong_count} of {total} elements differ ({expected.dtype} values must match exactly).",
                      {"index": list(index), "mismatches": wrong_count, "expected": _item(expected, first_wrong),
                       "actual": _item(actual, first_wrong)})
    stats = {"max_abs_error": max_abs, "max_rel_error": max_rel, "elements": total, "atol": atol, "rtol": rtol}
    if "magnitude" in tolerance:
        stats["reference_rms"] = tolerance["magnitude"]
    if first_broken is not None:
        index = unravel(first_broken, shape)
        want, got = _item(expected, first_broken), _item(actual, first_broken)
        hint = _poison_hint(actual, first_broken, broken_count, written_before)
        raise Failure("non_finite",
                      f"{where} holds {broken_count} non-finite values where the reference is finite ({nan_count} NaN);"
                      f" the first is at index {_format_index(index)}: expected {_format_value(want)}, got"
                      f" {_format_value(got)}.{hint}",
                      {"index": list(index), "count": broken_count, "nan_count": nan_count,
                       "expected": _json_number(want), "actual": _json_number(got), "hint": hint,
                       "poison": _is_poison(actual, first_broken)})
    if first_wrong is None:
        return stats
    index = unravel(first_wrong, shape)
    want, got = _item(expected, first_wrong), _item(actual, first_wrong)
    allowed = atol + rtol * abs(want)
    message = (f"{where} differs from the reference at index {_format_index(index)} (shape {shape}):"
               f" expected {_format_value(want)}, got {_format_value(got)}"
               f" (|difference| {abs(got - want):.3g} > {describe_atol(tolerance)} + rtol {rtol:g} x |expected|"
               f" = {allowed:.3g})."
               f" {wrong_count} of {total} elements ({100.0 * wrong_count / total:.3g}%) are outside the"
               f" tolerance; the largest difference is {max_abs:.3g} at index"
               f" {_format_index(unravel(worst, shape))}.")
    hint = _value_hint(actual, first_wrong, wrong_count, total, written_before)
    raise Failure("value_mismatch", message + hint,
                  dict(stats, index=list(index), mismatches=wrong_count, expected=_json_number(want),
                       actual=_json_number(got), worst_index=list(unravel(worst, shape)), hint=hint))


def _json_number(value):
    if isinstance(value, complex):
        return [value.real, value.imag]
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return str(value)
    return value


def _every_chunk(tensor: torch.Tensor, test) -> bool:
    """Whether ``test`` holds for every chunk of ``tensor``'s elements (stops at the first
    chunk where it does not), so that whole-output checks stay within CHUNK temporaries."""
    flat = tensor.reshape(-1)
    return all(bool(test(flat[start:start + CHUNK])) for start in range(0, flat.numel(), CHUNK))


def _is_poison(tensor: torch.Tensor, flat: int) -> bool:
    try:
        return bool((tensor.reshape(-1)[flat:flat + 1].contiguous().view(torch.uint8) == POISON_BYTE).all())
    except RuntimeError:
        return False


def _all_poison(tensor: torch.Tensor) -> bool:
    return _every_chunk(tensor, lambda chunk: (chunk.contiguous().view(torch.uint8) == POISON_BYTE).all())


def _poison_hint(actual: torch.Tensor, first: int, count: int, written_before: bool = False) -> str:
    try:
        element = actual.reshape(-1)[first:first + 1].contiguous().view(torch.uint8)
        if written_before:
            if bool((element == POISON_BYTE).all()):
                whole = "every byte of this output" if _all_poison(actual) else "the first of these elements"
                return (f" In this call {whole} still held the pattern the harness writes into free memory before each"
                        " call, although an earlier call on the same inputs wrote the right values there: this call"
                        " skipped writing them (work that depends on earlier calls, a race, or a result handed back"
                        " from memory that was freed and poisoned since).")
            return ""
        if _all_poison(actual):
            return (" Every byte of this output is the pattern the harness writes into free memory before each call:"
                    " the output was never written (for example torch.empty without a kernel writing it).")
        if bool((element == POISON_BYTE).all()):
            return (f" The first of these {count} elements holds the harness's poison pattern: part of the output was"
                    " never written (a missing boundary check, a grid too small, or an early return).")
    except RuntimeError:
        pass
    return ""


def _value_hint(actual: torch.Tensor, first: int, wrong: int, total: int, written_before: bool = False) -> str:
    try:
        if _every_chunk(actual, lambda chunk: (chunk == 0).all()):
            return " The output is all zeros."
        if written_before:
            return ""
        if total > 16 and first >= total // 2:
            return " The first half matches; the error is in the later elements."
        if wrong <= max(1, total // 1000):
            return " Only a few elements are wrong: look at boundaries, tails and tile edges."
    except RuntimeError:
        pass
    return ""


def nonfinite_free(tensor: torch.Tensor) -> bool:
    if not (tensor.dtype.is_floating_point or tensor.dtype.is_complex):
        return True
    return bool(torch.isfinite(tensor).all())

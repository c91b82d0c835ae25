# SPDX-License-Identifier: Apache-2.0
"""What may run inside ``ModelNew.forward``: the candidate's extension, and torch operations
that create tensors, move or copy them, or change only their metadata. Everything else
(torch compute functions, ``torch.nn.functional``, Tensor compute methods, ``torch.ops.aten``
and the aten calls the candidate's own C++ makes through the dispatcher) is refused.

Two torch modes enforce it while forward runs:
  * a TorchDispatchMode sees every operator that reaches the dispatcher, from Python or C++,
    and refuses those outside the allowlist; it is the ground truth;
  * a TorchFunctionMode names the Python-level call that led there (for the message) and
    refuses the exits that bypass the dispatcher (``.numpy()``, ``.tolist()``, DLPack).
Refusals raise inside forward and are also recorded, so that a candidate that catches the
exception is rejected all the same.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

#: aten operators (by overload packet) that create, copy, convert, view or describe tensors.
ALLOWED_ATEN = frozenset({
    # creation
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "scalar_tensor", "arange", "lift_fresh", "lift_fresh_copy", "lift",
    # copies and conversions
    "_to_copy", "to", "copy_", "clone", "contiguous", "detach", "detach_", "alias", "_local_scalar_dense",
    "fill_", "zero_", "resize_", "resize_as_", "is_pinned", "_pin_memory", "record_stream",
    # views and metadata
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "expand_as", "permute", "t",
    "transpose", "unsqueeze", "squeeze", "slice", "select", "narrow", "split", "split_with_sizes", "chunk",
    "unbind", "unfold", "diagonal", "movedim", "view_as", "view_as_real", "view_as_complex", "real", "imag",
    "flatten", "unflatten", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride",
    "numel", "dim", "is_contiguous", "is_same_size", "set_", "_has_compatible_shallow_copy_type",
})

#: Allowed operators that may convert between dtypes. Between floating-point dtypes (and from
#: integers to them) a conversion moves values; from floating-point or complex values to
#: integers or booleans, or from complex to real ones, it computes: x.to(torch.int64) is
#: torch.trunc, x.to(torch.bool) is x != 0. From integers to a narrower integer type it
#: computes unless every value fits: x.to(torch.uint8) is x & 255. fill_ converts its value
#: to the tensor's dtype the same way.
CONVERSIONS = frozenset({"_to_copy", "to", "copy_", "fill_"})

#: Python-level functions that make tensors from sizes, bounds and fill values: given a
#: tensor there, they turn its data into sizes and numbers on the host (torch.arange(0, v)
#: has v elements), a channel out of torch for anything computed from them.
CREATION_FUNCTIONS = frozenset({
    "torch.arange", "torch.range", "torch.linspace", "torch.logspace", "torch.full", "torch.zeros", "torch.ones",
    "torch.empty", "torch.empty_strided", "torch.randint", "torch.randn", "torch.rand", "torch.randperm",
    "torch.eye", "torch.tril_indices", "torch.triu_indices", "Tensor.new_full", "Tensor.new_zeros",
    "Tensor.new_ones", "Tensor.new_empty", "Tensor.new_empty_strided", "torch.full_like",
})

#: Python-level calls that leave torch with the data (and so could compute elsewhere).
DENIED_FUNCTIONS = frozenset({
    "Tensor.numpy", "Tensor.tolist", "Tensor.__array__", "Tensor.__array_wrap__", "Tensor.__dlpack__",
    "torch.from_numpy", "torch.from_dlpack", "torch.utils.dlpack.from_dlpack", "torch.utils.dlpack.to_dlpack",
})

#: Scalars read one by one with .item() beyond this count are host computation.
MAX_ITEM_CALLS = 4096


class ForbiddenOperation(RuntimeError):
    """Raised inside forward when it runs something the contract forbids."""


def describe_function(func) -> str:
    """A readable name for what a TorchFunctionMode sees."""
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or str(func)
    module = getattr(func, "__module__", None) or ""
    if qualname.startswith("_VariableFunctionsClass."):
        return "torch." + qualname.split(".", 1)[1]
    if qualname.startswith(("TensorBase.", "_TensorBase.")):
        return "Tensor." + qualname.split(".", 1)[1]
    if qualname.startswith("Tensor."):
        return qualname
    if "::" in qualname:
        return "torch.ops." + qualname.replace("::", ".")
    if isinstance(func, torch._ops.OpOverloadPacket) or isinstance(func, torch._ops.OpOverload):
        return "torch.ops." + str(func)
    if module.startswith("torch"):
        return f"{module}.{qualname}"
    return qualname


class ForwardGuard:
    """Active around each call of ``ModelNew.forward``."""

    def __init__(self, allowed_aten=ALLOWED_ATEN, extra_allowed=(), max_item_calls=MAX_ITEM_CALLS, allocations=None):
        self.allowed = frozenset(allowed_aten) | frozenset(extra_allowed)
        #: Where allowed creation operators may take their memory instead of torch's
        #: allocator (``trusted_clock.ArenaAllocations``: a trusted batch's outputs).
        self.allocations = allocations
        self.max_item_calls = max_item_calls
        self.violations: list[dict] = []
        self.item_calls = 0
        self._python_stack: list[str] = []
        self._function_mode = _FunctionMode(self)
        self._dispatch_mode = _DispatchMode(self)
        self.tampered = False
        self._allowed_at_entry = self.allowed

    def refuse(self, operation: str, python: str | None, why: str) -> None:
        record = {"operation": operation, "called_as": python, "why": why}
        if len(self.violations) < 32:
            self.violations.append(record)
        shown = f"{python} ({operation})" if python and python != operation else operation
        raise ForbiddenOperation(f"{shown} is not allowed inside ModelNew.forward: {why}")

    def current_python(self) -> str | None:
        return self._python_stack[-1] if self._python_stack else None

    def __enter__(self):
        self._function_mode.__enter__()
        self._dispatch_mode.__enter__()
        return self

    def __exit__(self, kind, value, trace):
        dispatch_stack = _get_current_dispatch_mode_stack()
        function_stack = _get_current_function_mode_stack()
        # The allowlist is checked by identity and content: code that widened it for the
        # call and put it back would leave another object, or the same set grown.
        self.tampered = not (dispatch_stack and dispatch_stack[-1] is self._dispatch_mode and function_stack
                             and function_stack[-1] is self._function_mode
                             and self.allowed is self._allowed_at_entry
                             and isinstance(self.allowed, frozenset))
        try:
            self._dispatch_mode.__exit__(kind, value, trace)
        finally:
            self._function_mode.__exit__(kind, value, trace)
        return False

    def first_violation(self) -> dict | None:
        if self.violations:
            return self.violations[0]
        if self.tampered:
            return {"operation": "torch mode stack", "called_as": None,
                    "why": "forward changed the torch function or dispatch mode stack, or the guard's allowlist,"
                           " removing the guard"}
        return None


def _value_changing_conversion(packet: str, args, kwargs) -> str | None:
    """'<from> to <to>' when the conversion ``packet(*args, **kwargs)`` computes, else None."""
    if packet in ("copy_", "fill_"):
        if len(args) < 2 or not isinstance(args[0], torch.Tensor) or not isinstance(args[1], torch.Tensor):
            return None
        source, target = args[1].dtype, args[0].dtype
    else:
        if not args or not isinstance(args[0], torch.Tensor):
            return None
        source = args[0].dtype
        target = kwargs.get("dtype")
        for value in list(args[1:]):
            if isinstance(value, torch.dtype):
                target = value
            elif isinstance(value, torch.Tensor) and packet == "to":
                target = value.dtype
        if not isinstance(target, torch.dtype):
            return None
    if (source.is_floating_point or source.is_complex) and not (target.is_floating_point or target.is_complex):
        what = "a comparison with zero" if target == torch.bool else "a truncation"
        return f"{source} values to {target} ({what})"
    if source.is_complex and not target.is_complex:
        return f"{source} values to {target} (the imaginary part is dropped)"
    if target == torch.bool and source != torch.bool:
        # Integers to booleans compare with zero too, also the bits of floats seen as integers.
        return f"{source} values to {target} (a comparison with zero)"
    if _narrower_integer(source, target):
        values = args[1] if packet in ("copy_", "fill_") else args[0]
        if not _fits(values, target):
            return f"{source} values to {target}, some of which do not fit (a truncation)"
    return None


def _lazy_computation(args) -> str | None:
    """What a lazily negated or conjugated tensor among ``args`` would make an operator compute."""
    for value in args:
        if isinstance(value, torch.Tensor):
            if value.is_neg():
                return "a tensor with its negation bit set (a copy of it computes -x)"
            if value.is_conj():
                return "a tensor with its conjugation bit set (a copy of it computes conj(x))"
    return None


def _narrower_integer(source: torch.dtype, target: torch.dtype) -> bool:
    """Whether some integer of ``source`` has no value in ``target`` (both integer dtypes)."""
    if source.is_floating_point or source.is_complex or target.is_floating_point or target.is_complex:
        return False
    if torch.bool in (source, target):
        return False
    try:
        wide, narrow = torch.iinfo(source), torch.iinfo(target)
    except TypeError:
        return False
    return narrow.min > wide.min or narrow.max < wide.max


def _fits(values: torch.Tensor, target: torch.dtype) -> bool:
    """Whether every element of ``values`` is a value of ``target`` (runs below the guard's
    modes: the check is the guard's own work, not the candidate's)."""
    if values.numel() == 0:
        return True
    bounds = torch.iinfo(target)
    low, high = torch.aminmax(values.detach().reshape(-1))
    return int(low) >= bounds.min and int(high) <= bounds.max


class _FunctionMode(TorchFunctionMode):
    def __init__(self, guard: ForwardGuard):
        super().__init__()
        self.guard = guard

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = describe_function(func)
        if name in DENIED_FUNCTIONS:
            self.guard.refuse(name, name, "it hands the tensor's data to code outside torch and the extension")
        if name in CREATION_FUNCTIONS:
            skip_first = name.startswith("Tensor.") or name.endswith("_like")
            given = list(args[1:] if skip_first else args) + [value for key, value in (kwargs or {}).items()
                                                               if key != "out"]
            given = [each for value in given for each in (value if isinstance(value, (list, tuple)) else (value,))]
            if any(isinstance(value, torch.Tensor) for value in given):
                self.guard.refuse(name, name, "a tensor given as a size, bound or fill value turns its data into"
                                              " numbers on the host; pass Python numbers and shapes")
        self.guard._python_stack.append(name)
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.guard._python_stack.pop()


class _DispatchMode(TorchDispatchMode):
    def __init__(self, guard: ForwardGuard):
        super().__init__()
        self.guard = guard

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        namespace = getattr(func, "namespace", "aten")
        packet = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        operation = f"{namespace}.{packet}"
        if namespace == "aten" and packet in self.guard.allowed:
            lazy = _lazy_computation(args)
            if lazy:
                self.guard.refuse(operation, self.guard.current_python(),
                                  f"it reads {lazy}, which makes the copy compute; do it in your kernels")
            if packet in CONVERSIONS:
                lost = _value_changing_conversion(packet, args, kwargs or {})
                if lost:
                    self.guard.refuse(operation, self.guard.current_python(),
                                      f"converting {lost} computes; do it in your kernels")
            if packet == "_local_scalar_dense":
                self.guard.item_calls += 1
                if self.guard.item_calls > self.guard.max_item_calls:
                    self.guard.refuse(operation, "Tensor.item",
                                      f"more than {self.guard.max_item_calls} scalars were read one by one, which is"
                                      " computing on the host")
            if self.guard.allocations is not None:
                served = self.guard.allocations.serve(func, args, kwargs or {})
                if served is not None:
                    return served
            return func(*args, **(kwargs or {}))
        if operation in self.guard.allowed:
            return func(*args, **(kwargs or {}))
        if namespace != "aten":
            # A registered operator runs its implementation below this mode, where the
            # operators it calls would go unseen; the contract's extension is a plain module.
            self.guard.refuse(operation, self.guard.current_python(),
                              "registered torch operators are not part of the candidate contract; call the"
                              " functions of cuda_extension directly")
        self.guard.refuse(operation, self.guard.current_python(),
                          "only the custom extension and tensor creation, copy and metadata operations may run;"
                          " implement this computation in your kernels")

# SPDX-License-Identifier: Apache-2.0
"""ModelNew's own Python state must not change from call to call.

A candidate that counts its calls (``self.calls += 1``, a counter in a child module, in a
list or dict, in a global of model_new.py) or remembers the addresses of its inputs can
behave one way while it is verified and another once it believes it is being timed, which
calls it far more often. The forward guard and the grammar do not see that: counting is
legal Python. So after every call the trusted harness in the candidate's process reads the
state of ``ModelNew`` and of model_new.py's globals and compares it with what it read after
the call before. Caches built lazily are legitimate (a CUDA graph captured on the first call,
an output buffer kept per shape, a stream created on first use): changes are allowed during
the first ``SETTLING_CALLS`` calls, and none after.

What is read, without running candidate code (no attribute lookups through the candidate's
classes, no ``__eq__``/``__hash__``/``__iter__`` of its objects: everything is turned into a
canonical value of builtin tuples, strings and numbers first):

* Python numbers, strings, bytes, None and booleans by value; lists, tuples, dicts, sets and
  frozensets (and subclasses, through the builtin type's own methods) by their contents;
* tensors by identity and metadata (shape, dtype, device, strides, address), and those that
  are neither a parameter or persistent buffer of a module nor part of the call's outputs by
  contents too: a counter or a memo of earlier results kept in a tensor and written in place
  by native code shows there. Small CPU tensors (up to ``SMALL_TENSOR_ELEMENTS`` elements)
  are read whole, so that a message can show the values; larger ones, and those on a GPU, by
  a fingerprint of their bytes computed where they lie (``ContentsFingerprint``). A tensor
  that holds a copy of one of the call's inputs or outputs reads as such a copy, whatever the
  values: the static buffers a CUDA graph is replayed on (the input copied in, the output
  copied out) are rewritten every call and keep nothing of the calls before. Scratch memory
  kept from call to call is state by this rule even where it is rewritten before it is read:
  the harness cannot tell it from a memo, and the caching allocator serves a buffer allocated
  in forward at no cost. The contents of parameters and
  persistent buffers (the weights) are checked once, after the last call, against the
  weights that were loaded (buffers only in eval mode: BatchNorm in train mode updates its
  running statistics);
* objects by type and identity plus their ``__dict__`` and slots; the file's own functions
  by identity plus their defaults and closures; the file's classes by their attributes;
  modules, torch's and the standard library's functions and classes by identity only;
* torch dtypes, devices and streams by value, events by type (a new event or a new handle
  of the same stream each call is no state the candidate can branch on).

A task whose reference itself keeps state from call to call (a recurrent cell that stores its
hidden state in ``self.hidden`` and replaces it every call) makes the same state part of the
task: the audit records which tensors the reference Model keeps that way (``KeptStateLog``),
and ModelNew may keep a plain tensor of the same shape and dtype under the same name, read
without its identity. Anything else kept there, or anywhere else, is still read in full.

A reading stops at ``MAX_DEPTH`` levels of nesting and ``MAX_VALUES`` values: a state too
large or too deep to read is rejected too, so that nothing can hide behind a huge list."""

from __future__ import annotations

import collections
import functools
import os
import types

import torch
import torch.nn as nn

from .compare import Failure as Rejected
from .hygiene import same_bits

#: Calls during which ModelNew's state may still change (caches built on first use).
SETTLING_CALLS = 3
#: Levels of nesting a reading follows at most.
MAX_DEPTH = 32
#: Values a reading reads at most.
MAX_VALUES = 65536
#: CPU tensors this small that are no parameter, buffer or output are read whole (larger
#: ones by a fingerprint of their contents).
SMALL_TENSOR_ELEMENTS = 64

REASON = "state_kept_between_calls"

_ADVICE = (f" ModelNew.forward must depend only on its inputs and weights: caches may be built during the first"
           f" {SETTLING_CALLS} calls (a CUDA graph, an output buffer per shape, a packed weight, a stream) and must"
           " stay the same after that; keep no counters, no record of earlier inputs and nothing that changes from"
           " call to call.")

# Reading goes through the builtin types' own slots, never through the candidate's classes.
_class_namespace = type.__dict__["__dict__"].__get__
_class_mro = type.__dict__["__mro__"].__get__
_type_name = type.__dict__["__qualname__"].__get__
_tensor_base = torch._C.TensorBase
_tensor_shape = _tensor_base.__dict__["shape"].__get__
_tensor_dtype = _tensor_base.__dict__["dtype"].__get__
_tensor_device = _tensor_base.__dict__["device"].__get__
_tensor_layout = _tensor_base.__dict__["layout"].__get__
_tensor_requires_grad = _tensor_base.__dict__["requires_grad"].__get__
_stream_fields = tuple(torch.Stream.__dict__[name].__get__ for name in ("stream_id", "device_index", "device_type"))
_lru_info = functools._lru_cache_wrapper.cache_info

#: Globals that the import machinery and the warnings module (its registry of warnings shown)
#: set in every module, and that are no state of the file.
_MODULE_ENTRIES_SKIPPED = frozenset({"__builtins__", "__loader__", "__spec__", "__warningregistry__"})
#: torch values compared by what they say, not by which Python object says it.
_DESCRIBED_BY_VALUE = (torch.dtype, torch.device, torch.layout, torch.memory_format, torch.finfo, torch.iinfo)
_PRIMITIVES = (bool, int, float, complex, str, bytes)
_IDENTITY_ONLY = (types.ModuleType, types.BuiltinFunctionType, types.MethodWrapperType, types.WrapperDescriptorType,
                  types.MethodDescriptorType, types.ClassMethodDescriptorType, types.GetSetDescriptorType,
                  types.MemberDescriptorType)


class _Stop(Exception):
    """A reading that went past its depth or its budget, at ``path``."""

    def __init__(self, kind: str, path: str):
        super().__init__(kind)
        self.kind = kind
        self.path = path


class _Reader:
    """One reading of the state: a canonical value (nested tuples of builtin values) per root."""

    def __init__(self, module_name: str, module_globals: dict, weight_ids: set[int], output_storages: set[int],
                 kept_state: dict | None = None, contents: "ContentsFingerprint | None" = None,
                 call_tensors: tuple = ()):
        self.module_name = module_name
        self.kept_state = kept_state or {}
        self.module_globals = module_globals
        self.weight_ids = weight_ids
        self.output_storages = output_storages
        self.contents_fingerprint = contents or ContentsFingerprint()
        #: The call's inputs and outputs, and their fingerprints once one was needed.
        self.call_tensors = tuple(call_tensors)
        self.call_fingerprints: dict[int, tuple] = {}
        self.values = 0
        #: Objects read already in this reading, by id: the path where they were first read.
        self.seen: dict[int, str] = {}

    # -- dispatch --------------------------------------------------------------------------------
    def read(self, value, path: str, depth: int):
        self.values += 1
        if self.values > MAX_VALUES:
            raise _Stop("budget", path)
        if depth > MAX_DEPTH:
            raise _Stop("depth", path)
        kind = type(value)
        # Types are compared with ``is``: ``in`` would ask a metaclass's __eq__.
        if value is None or kind is bool or kind is int or kind is str or kind is bytes:
            return ("value", kind.__name__, value)
        if kind is float or kind is complex:
            return ("value", kind.__name__, kind.__repr__(value))
        if issubclass(kind, _DESCRIBED_BY_VALUE):
            return ("value", kind.__name__, _repr_of(value))
        if issubclass(kind, torch.Tensor):
            return self.remembered(value, path, lambda: self.tensor(value, path, depth))
        if issubclass(kind, torch.Stream):
            return ("stream", kind.__name__, tuple(_safe(get, value) for get in _stream_fields))
        if issubclass(kind, torch.Event):
            return ("event", kind.__name__, self.attributes(value, path, depth))
        if kind is tuple or kind is frozenset or kind is torch.Size:
            # Immutable and often shared (the empty tuple is one object): read where it is found.
            return self.sequence(value, path, depth) if kind is not frozenset else self.unordered(value, path, depth)
        if issubclass(kind, (list, tuple, collections.deque)):
            return self.remembered(value, path, lambda: self.sequence(value, path, depth))
        if issubclass(kind, dict):
            return self.remembered(value, path, lambda: self.mapping(value, path, depth))
        if issubclass(kind, (set, frozenset)):
            return self.remembered(value, path, lambda: self.unordered(value, path, depth))
        if issubclass(kind, _PRIMITIVES):  # a subclass of a builtin value type: its value and its attributes
            base = next(b for b in _PRIMITIVES if issubclass(kind, b))
            return self.remembered(value, path, lambda: (
                "object", _type_name(kind), id(value),
                (("(value)", ("value", base.__name__, _safe(lambda v: _repr_of(v, base), value))),)
                + self.attributes(value, path, depth)))
        if kind is type or issubclass(kind, type):
            if self.is_own_class(value):
                return self.remembered(value, path, lambda: self.own_class(value, path, depth))
            return ("ref", "class", _name_of(value), id(value))
        if kind is types.FunctionType:
            if value.__globals__ is self.module_globals:
                return self.remembered(value, path, lambda: self.own_function(value, path, depth))
            return ("ref", "function", _name_of(value), id(value))
        if kind is types.MethodType:
            return ("method", id(value.__func__), id(value.__self__))
        if kind is functools._lru_cache_wrapper:
            return self.remembered(value, path, lambda: self.cached_function(value, path, depth))
        if issubclass(kind, _IDENTITY_ONLY):
            return ("ref", kind.__name__, _name_of(value), id(value))
        return self.remembered(value, path, lambda: (
            "object", _type_name(kind), id(value), self.attributes(value, path, depth)))

    def remembered(self, value, path: str, read):
        """An object read a second time in one reading is named by where it was first read."""
        first = self.seen.get(id(value))
        if first is not None:
            return ("seen", first)
        self.seen[id(value)] = path
        return read()

    # -- containers ------------------------------------------------------------------------------
    def sequence(self, value, path: str, depth: int):
        kind = type(value)
        base = next(b for b in (list, tuple, collections.deque) if issubclass(kind, b))
        items = tuple(self.read(item, f"{path}[{index}]", depth + 1)
                      for index, item in enumerate(list(base.__iter__(value))))
        extra = self.attributes(value, path, depth) if kind is not base and kind is not torch.Size else ()
        return ("sequence", _type_name(kind), items, extra)

    def mapping(self, value, path: str, depth: int):
        kind = type(value)
        pairs = []
        for key, item in list(dict.items(value)):
            key_value = self.read(key, f"{path} (a key)", depth + 1)
            pairs.append((key_value, self.read(item, path + _key_step(path, key_value), depth + 1)))
        extra = self.attributes(value, path, depth) if kind is not dict and kind is not collections.OrderedDict else ()
        return ("mapping", _type_name(kind), tuple(pairs), extra)

    def unordered(self, value, path: str, depth: int):
        kind = type(value)
        base = set if issubclass(kind, set) else frozenset
        items = [self.read(item, f"{path} (an element)", depth + 1) for item in list(base.__iter__(value))]
        # Iteration order follows insertion history; the canonical values are put in an order of their own.
        items.sort(key=repr)
        extra = self.attributes(value, path, depth) if kind is not base else ()
        return ("set", _type_name(kind), tuple(items), extra)

    # -- objects ---------------------------------------------------------------------------------
    def attributes(self, value, path: str, depth: int) -> tuple:
        """(name, canonical value) of the instance's ``__dict__`` and of the slots its own
        classes declare."""
        pairs = []
        namespace = _instance_dict(value)
        if namespace is not None:
            for name, item in list(dict.items(namespace)):
                step = _attribute_step(path, name)
                if path == "ModelNew" and type(name) is str and _matches_kept_state(item, self.kept_state.get(name)):
                    # The reference replaces this tensor every call too: which tensor it is, is
                    # no state; anything hung on it is.
                    pairs.append((name, ("kept", "tensor", self.attributes(item, step, depth + 1))))
                    continue
                pairs.append((name, self.read(item, step, depth + 1)))
        for klass in _class_mro(type(value)):
            if not self.is_own_class(klass):
                continue
            for name, descriptor in list(_class_namespace(klass).items()):
                if type(descriptor) is types.MemberDescriptorType:
                    try:
                        item = descriptor.__get__(value, klass)
                    except AttributeError:
                        pairs.append((name, ("unset",)))
                        continue
                    pairs.append((name, self.read(item, _attribute_step(path, name), depth + 1)))
        return tuple(pairs)

    def is_own_class(self, klass) -> bool:
        """Whether ``klass`` was defined in model_new.py."""
        return _class_namespace(klass).get("__module__") == self.module_name

    def own_class(self, klass, path: str, depth: int):
        pairs = tuple((name, self.read(item, _attribute_step(path, name), depth + 1))
                      for name, item in list(_class_namespace(klass).items())
                      if name not in ("__dict__", "__weakref__"))
        return ("class", _type_name(klass), id(klass), pairs)

    def own_function(self, function, path: str, depth: int):
        cells = ()
        if function.__closure__:
            cells = tuple(self.read(_cell_contents(cell), f"{path} (closure)", depth + 1)
                          for cell in function.__closure__)
        return ("function", function.__qualname__, id(function),
                self.read(function.__defaults__, f"{path} (defaults)", depth + 1),
                self.read(function.__kwdefaults__, f"{path} (keyword defaults)", depth + 1),
                cells, self.attributes(function, path, depth))

    def cached_function(self, wrapper, path: str, depth: int):
        # The cache itself is out of reach; its size and misses grow with every new key
        # (hits grow with every legitimate use, and are left out).
        info = _lru_info(wrapper)
        return ("cached", id(wrapper), info.currsize, info.misses, self.attributes(wrapper, path, depth))

    def tensor(self, tensor, path: str, depth: int):
        with torch._C.DisableTorchFunctionSubclass():
            metadata = _safe(_tensor_metadata, tensor)
            contents = None
            if (metadata[0] != "unreadable" and id(tensor) not in self.weight_ids and isinstance(metadata[9], int)
                    and _safe(_storage_address, tensor) not in self.output_storages):
                contents = self.contents(tensor, metadata)
        return ("tensor", id(tensor), metadata, contents, self.attributes(tensor, path, depth))

    def contents(self, tensor, metadata: tuple):
        """What a tensor that is no weight or output holds: a copy of the call's inputs or
        outputs, its values (small CPU tensors), or a fingerprint of its bytes."""
        fingerprint = _safe(self.contents_fingerprint, tensor)
        if fingerprint[0] == "unreadable":
            return fingerprint
        for candidate in self.call_tensors:
            if self.call_fingerprint(candidate) == fingerprint:
                return ("copy of the call's inputs or outputs",)
        if metadata[3] == "cpu" and metadata[9] <= SMALL_TENSOR_ELEMENTS:
            return _safe(_contents, tensor)
        return fingerprint

    def call_fingerprint(self, tensor) -> tuple | None:
        known = self.call_fingerprints.get(id(tensor))
        if known is None:
            known = self.call_fingerprints[id(tensor)] = _safe(self.contents_fingerprint, tensor)
        return known


def _matches_kept_state(value, kept: dict | None) -> bool:
    """Whether ``value`` is a plain tensor shaped like the reference's kept state ``kept``."""
    if kept is None or type(value) is not torch.Tensor:
        return False
    with torch._C.DisableTorchFunctionSubclass():
        return (list(_tensor_shape(value)) == list(kept.get("shape", ()))
                and str(_tensor_dtype(value)) == kept.get("dtype"))


def _safe(getter, value):
    try:
        return getter(value)
    except Exception as error:  # a tensor without storage, a stream of another build: what failed is the reading
        return ("unreadable", type(error).__name__)


def _repr_of(value, base=None) -> str:
    return (base or type(value)).__repr__(value)


def _name_of(value) -> str:
    for attribute in ("__qualname__", "__name__"):
        try:
            name = object.__getattribute__(value, attribute)
        except Exception:
            continue
        if type(name) is str:
            return name
    return type(value).__name__


def _cell_contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _instance_dict(value) -> dict | None:
    """The instance's ``__dict__`` through the C descriptor of its class, if it has one."""
    for klass in _class_mro(type(value)):
        descriptor = _class_namespace(klass).get("__dict__")
        if descriptor is None:
            continue
        if type(descriptor) not in (types.GetSetDescriptorType, types.MemberDescriptorType):
            return None
        try:
            namespace = descriptor.__get__(value, klass)
        except Exception:
            return None
        return namespace if isinstance(namespace, dict) else None
    return None


def _tensor_metadata(tensor) -> tuple:
    """(class, shape, dtype, device, layout, requires_grad, address, storage offset, strides,
    elements)."""
    return (_type_name(type(tensor)), tuple(_tensor_shape(tensor)), str(_tensor_dtype(tensor)),
            str(_tensor_device(tensor)), str(_tensor_layout(tensor)), bool(_tensor_requires_grad(tensor)),
            _safe(_tensor_base.data_ptr, tensor), _safe(_tensor_base.storage_offset, tensor),
            _safe(lambda t: tuple(_tensor_base.stride(t)), tensor), _safe(_tensor_base.numel, tensor))


class ContentsFingerprint:
    """A fingerprint of a tensor's bytes, computed on the tensor's device: (bytes, the sum
    of its 8-byte words, their sum weighted by odd numbers drawn for this watch, repeating
    every ``PERIOD`` words). Any change of a word changes both sums but for a chance of
    about 2^-64; the weights make a change that keeps the plain sum (two words swapped, a
    value moved) show in the weighted one. Work tensors stay under ``CHUNK_WORDS`` words."""

    PERIOD = 1 << 16
    CHUNK_WORDS = 1 << 24

    def __init__(self, seed: int | None = None):
        generator = torch.Generator().manual_seed(seed if seed is not None else int.from_bytes(os.urandom(8), "little")
                                                  & ((1 << 63) - 1))
        self.weights = torch.randint(-(1 << 62), 1 << 62, (self.PERIOD,), dtype=torch.int64,
                                     generator=generator) * 2 + 1
        self.weights_on: dict[str, torch.Tensor] = {}

    def __call__(self, tensor) -> tuple:
        with torch._C.DisableTorchFunctionSubclass(), torch.no_grad():
            plain = _tensor_base.contiguous(_tensor_base.reshape(_tensor_base.detach(tensor), (-1,)))
            raw = _tensor_base.view(plain, torch.uint8)
            size = _tensor_base.numel(raw)
            if size % 8:
                raw = torch.cat([raw, raw.new_zeros(8 - size % 8)])
            elif _tensor_base.storage_offset(raw) % 8:
                raw = _tensor_base.clone(raw)
            words = _tensor_base.view(raw, torch.int64)
            weights = self.weights_for(words.device)
            plain_sum = torch.zeros((), dtype=torch.int64, device=words.device)
            weighted_sum = torch.zeros((), dtype=torch.int64, device=words.device)
            count = _tensor_base.numel(words)
            for start in range(0, count, self.CHUNK_WORDS):
                chunk = words[start:start + self.CHUNK_WORDS]
                plain_sum += chunk.sum()
                whole = chunk.numel() - chunk.numel() % self.PERIOD
                if whole:
                    weighted_sum += (chunk[:whole].view(-1, self.PERIOD) * weights).sum()
                if whole < chunk.numel():
                    weighted_sum += (chunk[whole:] * weights[:chunk.numel() - whole]).sum()
            return ("fingerprint", size, int(plain_sum), int(weighted_sum))

    def weights_for(self, device) -> torch.Tensor:
        key = str(device)
        if key not in self.weights_on:
            self.weights_on[key] = self.weights.to(device)
        return self.weights_on[key]


def _storage_address(tensor) -> int:
    return _tensor_base.untyped_storage(tensor).data_ptr()


def _contents(tensor) -> tuple:
    """(the tensor's bytes, its values as text): bits compare, values show."""
    flat = _tensor_base.contiguous(_tensor_base.reshape(_tensor_base.detach(tensor), (-1,)))
    shown = repr(_tensor_base.tolist(flat))
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return tuple(_tensor_base.tolist(_tensor_base.view(flat, torch.uint8))), shown


_TRANSPARENT = (("._parameters", "parameter"), ("._buffers", "buffer"), ("._modules", "submodule"))


def _attribute_step(path: str, name: str) -> str:
    return f"{path}.{name}"


def _key_step(path: str, key) -> str:
    """The path of an entry of a dict: ``.name`` in a module's parameters, buffers and
    submodules (as torch names them), ``['name']`` / ``[3]`` elsewhere."""
    shown = _shown_key(key)
    if key[0] == "value" and key[1] == "str" and any(path.endswith(suffix) for suffix, _ in _TRANSPARENT):
        return f".{key[2]}"
    return f"[{shown}]"


def _shown_key(key) -> str:
    literal = _literal(key)
    return literal if literal is not None else _describe(key)


def _literal(value, depth: int = 0) -> str | None:
    """A value of numbers, strings and tuples of them as Python writes it (a cache's key)."""
    if value[0] == "value":
        return repr(value[2]) if value[1] in ("str", "bytes") else "None" if value[1] == "NoneType" else str(value[2])
    if value[0] == "sequence" and value[1] in ("tuple", "Size") and depth < 4 and len(value[2]) <= 8:
        parts = [_literal(item, depth + 1) for item in value[2]]
        if None not in parts:
            return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    return None


def _display(path: str) -> str:
    """A path as the candidate's author writes it: ModelNew.layers.0.calls, not
    ModelNew._modules.layers._modules.0.calls."""
    for suffix, _ in _TRANSPARENT:
        path = path.replace(suffix + ".", ".")
    return path


# -- comparing two readings ------------------------------------------------------------------------

def _describe(value) -> str:
    kind = value[0]
    if kind == "value":
        if value[1] == "NoneType":
            return "None"
        if value[1] in ("str", "bytes"):
            text = repr(value[2])
            return text if len(text) <= 60 else text[:57] + "..."
        return str(value[2])
    if kind == "sequence":
        return f"a {value[1]} of {len(value[2])} element(s)"
    if kind == "mapping":
        return f"a {value[1]} of {len(value[2])} entr{'y' if len(value[2]) == 1 else 'ies'}"
    if kind == "set":
        return f"a {value[1]} of {len(value[2])} element(s)"
    if kind == "tensor":
        if value[2][0] == "unreadable":
            return "a tensor whose metadata cannot be read"
        shape, dtype, device = value[2][1:4]
        address = value[2][6]
        at = f" at 0x{address:x}" if isinstance(address, int) else ""
        contents = f" holding {value[3][1]}" if value[3] is not None and len(value[3]) == 2 else ""
        return f"a {dtype.replace('torch.', '')} tensor of shape {list(shape)} on {device}{at}{contents}"
    if kind == "object":
        return f"a {value[1]} object (id 0x{value[2]:x})"
    if kind in ("ref", "class", "function"):
        return f"{kind} {value[2] if kind == 'ref' else value[1]}"
    if kind == "seen":
        return f"the same object as {_display(value[1])}"
    if kind == "stream":
        return f"a {value[1]} (id {value[2][0]})"
    if kind == "cached":
        return f"a cached function holding {value[2]} result(s)"
    if kind == "kept":
        return "a tensor like the one the reference keeps there"
    if kind == "method":
        return f"a bound method (of function id 0x{value[1]:x}, object id 0x{value[2]:x})"
    return kind


def first_difference(before, after, path: str) -> tuple[str, str] | None:
    """Where two canonical values first differ: (path, what changed), or None when they are
    the same state. The contents of a small tensor count only where both readings have them:
    a tensor that is the output of one call (double-buffered outputs) is not read then."""
    if before == after:
        return None
    kind = before[0]
    replaced = (path, f"changed from {_describe(before)} to {_describe(after)}")
    if kind != after[0] or (kind != "tensor" and before[1] != after[1]):
        return replaced
    if kind == "sequence":
        for index, (old, new) in enumerate(zip(before[2], after[2])):
            found = first_difference(old, new, f"{path}[{index}]")
            if found:
                return found
        if len(before[2]) != len(after[2]):
            return path, f"went from {len(before[2])} to {len(after[2])} element(s)"
        return _pairs_difference(before[3], after[3], path)
    if kind == "mapping":
        old, new = dict(before[2]), dict(after[2])
        for key, value in new.items():
            if key not in old:
                return path + _key_step(path, key), f"was added (it holds {_describe(value)})"
            found = first_difference(old[key], value, path + _key_step(path, key))
            if found:
                return found
        for key in old:
            if key not in new:
                return path + _key_step(path, key), "was removed"
        if [key for key, _ in before[2]] != [key for key, _ in after[2]]:
            return path, "has the same entries in another order"
        return _pairs_difference(before[3], after[3], path)
    if kind == "namespace":
        return _pairs_difference(before[2], after[2], path)
    if kind == "set":
        old, new = set(before[2]), set(after[2])
        added = [item for item in after[2] if item not in old]
        removed = [item for item in before[2] if item not in new]
        if added or removed:
            parts = []
            if added:
                parts.append(f"gained {len(added)} element(s) (such as {_describe(added[0])})")
            if removed:
                parts.append(f"lost {len(removed)} element(s) (such as {_describe(removed[0])})")
            return path, f"went from {len(before[2])} to {len(after[2])} element(s): {' and '.join(parts)}"
        return _pairs_difference(before[3], after[3], path)
    if kind == "object":
        if before[2] != after[2]:
            return path, f"was replaced: it held {_describe(before)}, now {_describe(after)}"
        return _pairs_difference(before[3], after[3], path)
    if kind == "tensor":
        if before[1] != after[1]:
            return path, f"now holds another tensor: {_describe(before)} before, {_describe(after)} now"
        if before[2] != after[2]:
            return replaced
        if before[3] != after[3] and before[3] is not None and after[3] is not None:
            return path, (f"changed its contents from {_shown_contents(before[3])} to {_shown_contents(after[3])} (a"
                          " tensor that is no parameter, persistent buffer or output of the call is read by its"
                          " contents: it may hold a copy of the call's inputs or outputs, as the static buffers of"
                          " a CUDA graph do, and nothing else that changes; allocate scratch memory in forward)")
        return _pairs_difference(before[4], after[4], path)
    if kind == "class":
        if before[2] != after[2]:
            return replaced
        return _pairs_difference(before[3], after[3], path)
    if kind == "function":
        if before[2] != after[2]:
            return replaced
        for index, label in ((3, " (defaults)"), (4, " (keyword defaults)")):
            found = first_difference(before[index], after[index], path + label)
            if found:
                return found
        for index, (old, new) in enumerate(zip(before[5], after[5])):
            found = first_difference(old, new, f"{path} (closure cell {index})")
            if found:
                return found
        return _pairs_difference(before[6], after[6], path)
    if kind == "cached":
        if before[2:4] != after[2:4]:
            return path, (f"cached new results: it held {before[2]} (after {before[3]} misses), now {after[2]}"
                          f" (after {after[3]} misses)")
        return _pairs_difference(before[4], after[4], path)
    if kind in ("event", "kept"):
        return _pairs_difference(before[2], after[2], path)
    return replaced


def _shown_contents(contents) -> str:
    if contents is None:
        return "unread contents"
    if contents[0] == "fingerprint":
        return f"{contents[1]} bytes of fingerprint {hash(contents[2:]) & 0xFFFFFFFF:08x}"
    if len(contents) == 1:
        return f"a {contents[0]}"
    return contents[1] if len(contents) == 2 else str(contents)


def _pairs_difference(before: tuple, after: tuple, path: str) -> tuple[str, str] | None:
    """The first difference between two tuples of (name, canonical value)."""
    old, new = dict(before), dict(after)
    for name, value in new.items():
        step = _attribute_step(path, name)
        if name not in old:
            return step, f"was added (it holds {_describe(value)})"
        found = first_difference(old[name], value, step)
        if found:
            return found
    for name in old:
        if name not in new:
            return _attribute_step(path, name), "was removed"
    return None


# -- the watch ---------------------------------------------------------------------------------------

def _module_tree(model: nn.Module):
    """(state-dict prefix, module) for every module reachable through ``_modules``, read
    without calling the candidate's methods."""
    found = []
    stack = [("", model, ())]
    while stack:
        prefix, module, ancestors = stack.pop()
        found.append((prefix, module))
        namespace = _instance_dict(module) or {}
        children = namespace.get("_modules")
        if type(children) is not dict:
            continue
        for name, child in reversed(list(dict.items(children))):
            if isinstance(name, str) and child is not None and issubclass(type(child), nn.Module) \
                    and id(child) not in ancestors:
                stack.append((f"{prefix}{name}.", child, ancestors + (id(module),)))
    return found


def _tensors_of(module: nn.Module, container: str) -> list[tuple[str, torch.Tensor]]:
    namespace = _instance_dict(module) or {}
    entries = namespace.get(container)
    if type(entries) is not dict:
        return []
    found = [(name, tensor) for name, tensor in list(dict.items(entries))
             if isinstance(name, str) and issubclass(type(tensor), torch.Tensor)]
    if container == "_buffers":  # the persistent ones: those of the state dict
        transient = namespace.get("_non_persistent_buffers_set")
        transient = set(set.__iter__(transient)) if issubclass(type(transient), set) else set()
        found = [(name, tensor) for name, tensor in found if name not in transient]
    return found


class StateWatch:
    """Reads ModelNew's state after every call and rejects a change after the settling calls.

    ``model``: the ModelNew instance; ``file_module``: the module model_new.py was imported
    as; ``weights``: the state dict that was loaded into the model (by state-dict name; by
    default what the parameters and persistent buffers hold now); ``buffers_fixed``:
    whether forward must leave the persistent buffers alone (eval mode: BatchNorm in train
    mode updates its running statistics in place); ``settling_calls``: the calls after which
    nothing may change any more (0 for a model that has been called many times already, as
    a timing process's after its warm-up); ``kept_state``: the tensors the task's reference
    keeps from call to call (``KeptStateLog.kept``), which ModelNew may keep under the same
    names."""

    def __init__(self, model: nn.Module, file_module, weights: dict | None = None, buffers_fixed: bool = True,
                 settling_calls: int = SETTLING_CALLS, kept_state: dict | None = None):
        self.model = model
        self.kept_state = dict(kept_state or {})
        self.module_globals = _instance_dict(file_module) or {}
        self.module_name = self.module_globals.get("__name__", "model_new")
        self.buffers_fixed = buffers_fixed
        if weights is None:
            weights = {name: _tensor_base.clone(_tensor_base.detach(tensor))
                       for _, name, tensor in self.weight_tensors()}
        self.weights = weights
        self.settling_calls = settling_calls
        self.contents_fingerprint = ContentsFingerprint()
        self.calls = 0
        self.previous = None
        self.previous_label: str | None = None
        #: Copies of weights that were not loaded (a persistent buffer registered on one of
        #: the first calls), taken when the settling calls end.
        self.settled: dict[str, torch.Tensor] = {}

    def after_call(self, label: str, outputs=(), inputs=()) -> None:
        """Reads the state after the call ``label``; ``outputs``: the call's output tensors
        (their memory may be a persistent buffer of the model, rewritten every call);
        ``inputs``: the call's inputs (a static buffer may hold a copy of them)."""
        self.calls += 1
        reading = self.read(outputs, inputs)
        if self.calls > self.settling_calls and self.previous is not None:
            found = None
            for (root, before), (_, after) in zip(self.previous, reading):
                found = first_difference(before, after, root)
                if found:
                    break
            if found:
                path, change = found
                shown = _display(path)
                raise Rejected(REASON,
                               f"between the end of {self.previous_label} and the end of {label}, {shown} {change}:"
                               " ModelNew keeps state that changes from call to call." + _ADVICE
                               + self.kept_state_advice(),
                               {"path": shown, "change": change, "calls": [self.previous_label, label]})
        if self.calls == max(1, self.settling_calls):
            self.settled = {name: _tensor_base.clone(_tensor_base.detach(tensor))
                            for _, name, tensor in self.weight_tensors() if name not in self.weights}
        self.previous, self.previous_label = reading, label

    def after_last_call(self) -> None:
        """After the last call: the parameters (and in eval mode the persistent buffers)
        still hold the weights that were loaded."""
        when = f"after the last call ({self.previous_label})" if self.previous_label else "after the calls"
        for kind, name, tensor in self.weight_tensors():
            expected = self.weights.get(name)
            origin = "when the weights were loaded"
            if expected is None:
                expected, origin = self.settled.get(name), f"at the end of call {max(1, self.settling_calls)}"
                if expected is None:
                    continue
            if not _same_tensor(tensor, expected):
                raise Rejected(REASON,
                               f"{when}, ModelNew's {kind} {name} no longer holds what it held {origin}: forward"
                               f" changed it in place. Parameters{' and buffers' if self.buffers_fixed else ''} must"
                               " keep the weights that were loaded (a counter or a record of earlier calls kept in a"
                               " tensor is state kept between calls)." + _ADVICE, {"tensor": name, "kind": kind})

    def kept_state_advice(self) -> str:
        if not self.kept_state:
            return ""
        names = ", ".join(f"Model.{name} (a tensor of shape {list(kept['shape'])}, {kept['dtype']})"
                          for name, kept in sorted(self.kept_state.items()))
        return (f" The task's reference keeps state of its own from call to call in {names}: ModelNew may keep"
                " the same, a plain tensor of that shape and dtype under the same name, and nothing else.")

    # -- reading -------------------------------------------------------------------------------------
    def read(self, outputs=(), inputs=()) -> tuple:
        """The canonical state now: model_new.py's globals, then ModelNew."""
        weight_ids = {id(tensor) for _, _, tensor in self.weight_tensors(every_buffer=True)}
        storages = set()
        for tensor in outputs or ():
            if issubclass(type(tensor), torch.Tensor):
                address = _safe(_storage_address, tensor)
                if isinstance(address, int):
                    storages.add(address)
        call_tensors = tuple(value for value in (*(inputs or ()), *(outputs or ()))
                             if issubclass(type(value), torch.Tensor))
        reader = _Reader(self.module_name, self.module_globals, weight_ids, storages, self.kept_state,
                         self.contents_fingerprint, call_tensors)
        globals_root = self.module_name
        try:
            file_state = tuple((name, reader.read(value, f"{globals_root}.{name}", 1))
                               for name, value in list(dict.items(self.module_globals))
                               if name not in _MODULE_ENTRIES_SKIPPED)
            model_state = reader.read(self.model, "ModelNew", 1)
        except _Stop as stop:
            shown = _display(stop.path)
            if stop.kind == "depth":
                problem = f"is nested more than {MAX_DEPTH} levels deep (at {shown})"
            else:
                problem = f"holds more than {MAX_VALUES} values (the reading stopped at {shown})"
            raise Rejected(REASON,
                           f"the state of ModelNew and of model_new.py's globals {problem}, more than the harness"
                           " reads to check that it stays the same from call to call. Keep large data in tensors"
                           " (parameters, buffers) rather than in Python containers." + _ADVICE,
                           {"path": shown, "limit": stop.kind}) from None
        return (globals_root, ("namespace", "globals", file_state)), ("ModelNew", model_state)

    def weight_tensors(self, every_buffer: bool = False) -> list[tuple[str, str, torch.Tensor]]:
        """(kind, state-dict name, tensor) of the parameters, and of the persistent buffers
        when they must stay fixed (or ``every_buffer``)."""
        found = []
        for prefix, module in _module_tree(self.model):
            for name, tensor in _tensors_of(module, "_parameters"):
                found.append(("parameter", prefix + name, tensor))
            if self.buffers_fixed or every_buffer:
                for name, tensor in _tensors_of(module, "_buffers"):
                    found.append(("buffer", prefix + name, tensor))
        return found


def _same_tensor(tensor: torch.Tensor, reference: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunctionSubclass(), torch.no_grad():
        if tuple(_tensor_shape(tensor)) != tuple(reference.shape) or _tensor_dtype(tensor) != reference.dtype:
            return False
        plain = _tensor_base.detach(tensor)
        if plain.device != reference.device:
            plain = plain.to(reference.device)
        return same_bits(plain, reference)


class KeptStateLog:
    """Which tensors the task's reference Model keeps in its own attributes and replaces from
    call to call (neither parameters nor buffers: a recurrent cell's ``self.hidden``). Run on
    the trusted reference, call after call (``after_call``); ``kept`` maps each such name to
    {"shape", "dtype"} of what it held last. The previous tensors are held, so that a
    replacement is never mistaken for the same object at a reused address."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.previous: dict[str, torch.Tensor] | None = None
        self.kept: dict[str, dict] = {}

    def after_call(self) -> None:
        namespace = _instance_dict(self.model) or {}
        now = {name: value for name, value in list(dict.items(namespace))
               if type(name) is str and type(value) is torch.Tensor}
        if self.previous is not None:
            for name, tensor in now.items():
                if name in self.kept or self.previous.get(name) is not tensor:
                    self.kept[name] = {"shape": list(tensor.shape), "dtype": str(tensor.dtype)}
        self.previous = now

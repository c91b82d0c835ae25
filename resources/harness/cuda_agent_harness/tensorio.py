# SPDX-License-Identifier: Apache-2.0
"""Outputs as raw bytes: what a candidate returned, described as JSON and stored in a slot
file, and read back by a trusted process without running anything the candidate wrote.

A description is a tree:
  {"kind": "tensor", "type": "torch.Tensor", "dtype": "float32", "shape": [2, 3],
   "device": "cuda:0", "layout": "strided", "offset": 0, "nbytes": 24}
  {"kind": "scalar", "type": "float", "value": 1.5}            (int, float, bool, None)
  {"kind": "sequence", "type": "tuple" | "list", "items": [...]}
  {"kind": "other", "type": "package.module.ClassName"}
Tensor bytes are the tensor's elements in logical (row-major) order at ``offset`` in the
slot file. Descriptions that come from an untrusted process go through ``validate``.
"""

from __future__ import annotations

import ctypes
import os

import torch

_DTYPES = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
    "bool": torch.bool, "complex64": torch.complex64, "complex128": torch.complex128,
}
for _name in ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        _DTYPES[_name] = getattr(torch, _name)
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}

#: Offsets of tensors in a slot are multiples of this (any dtype view stays aligned).
ALIGNMENT = 64
#: Nesting and size caps for untrusted descriptions.
MAX_DEPTH = 8
MAX_LEAVES = 4096
MAX_DIMS = 16

# Bound before any candidate code runs in this process; later reassignments of these
# names on the torch module or the Tensor class do not reach the harness.
_type = type
_isinstance = isinstance
_Tensor = torch.Tensor
_detach = torch.Tensor.detach
_copy = torch.Tensor.copy_
_view = torch.Tensor.view
_reshape = torch.Tensor.reshape
_contiguous = torch.Tensor.contiguous
_empty = torch.empty
_numel = torch.Tensor.numel
_data_ptr = torch.Tensor.data_ptr
_element_size = torch.Tensor.element_size
_stride = torch.Tensor.stride
_size = torch.Tensor.size


class DescriptionError(ValueError):
    """A description that is not well formed."""


def dtype_name(dtype: torch.dtype) -> str:
    return _NAMES.get(dtype, str(dtype).replace("torch.", ""))


def dtype_of(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise DescriptionError(f"unsupported dtype {name!r}") from None


def type_name(value) -> str:
    cls = _type(value)
    module = getattr(cls, "__module__", "") or ""
    qualname = getattr(cls, "__qualname__", getattr(cls, "__name__", "?"))
    if module in ("builtins", ""):
        return str(qualname)
    if cls is _Tensor:
        return "torch.Tensor"
    return f"{module}.{qualname}"


def element_size(dtype: torch.dtype) -> int:
    return _empty((), dtype=dtype).element_size()


def describe(value, layout: list, depth: int = 0) -> dict:
    """Describes ``value``; tensors are appended to ``layout`` as (description, tensor) in
    the order their bytes will be stored."""
    cls = _type(value)
    if cls is _Tensor:
        return _describe_tensor(value, layout)
    if _isinstance(value, _Tensor):
        # A subclass: reported as what it is, and its data is not read.
        return {"kind": "other", "type": type_name(value)}
    if cls in (tuple, list):
        if depth >= MAX_DEPTH:
            return {"kind": "other", "type": f"{cls.__name__} nested deeper than {MAX_DEPTH}"}
        return {"kind": "sequence", "type": cls.__name__, "items": [describe(item, layout, depth + 1) for item in value]}
    if cls in (int, float, bool) or value is None:
        return {"kind": "scalar", "type": cls.__name__, "value": value}
    return {"kind": "other", "type": type_name(value)}


def _describe_tensor(tensor: torch.Tensor, layout: list) -> dict:
    strided = tensor.layout == torch.strided
    description = {"kind": "tensor", "type": "torch.Tensor", "dtype": dtype_name(tensor.dtype),
                   "shape": list(_size(tensor)), "device": str(tensor.device),
                   "layout": str(tensor.layout).replace("torch.", ""), "strides": list(_stride(tensor)) if strided else [],
                   "overrides": sorted(name for name, item in getattr(tensor, "__dict__", {}).items() if callable(item))}
    if tensor.layout != torch.strided or tensor.device.type == "meta" or tensor.dtype not in _NAMES:
        description["nbytes"] = 0
        description["offset"] = 0
        description["unreadable"] = True
        return description
    description["nbytes"] = _numel(tensor) * _element_size(tensor)
    layout.append((description, tensor))
    return description


def assign_offsets(layout: list) -> int:
    """Gives each tensor of ``layout`` its place in the slot; returns the slot's size."""
    offset = 0
    for description, _ in layout:
        description["offset"] = offset
        offset += (description["nbytes"] + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    return offset


def write_slot(path: str, layout: list, staging: "ScratchBuffer | None" = None) -> int:
    """Stores the tensors of ``layout`` (after ``assign_offsets``) in the file at ``path``.

    A slot is rewritten in place, not truncated first: the file keeps its pages between
    calls, which the kernel would otherwise free and then allocate and zero again (for a
    64 MiB output that was most of the cost). Bytes go in with pwrite, not through a shared
    mapping, whose every page takes a write fault once written back (on the development VM
    a 64 MiB output took 43 ms through a mapping, 18 ms with pwrite).

    Tensors on a GPU go through ``staging`` (``write_through_staging``): a copy from the
    device to pageable memory is split by the driver into small transfers through its own
    buffers; on an H200 a 64 MiB output took 35 to 46 ms that way, page faults included."""
    size = assign_offsets(layout)
    staging = staging if staging is not None else ScratchBuffer()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.ftruncate(fd, size)
        for description, tensor in layout:
            if description["nbytes"] == 0:
                continue
            flat = _view(_reshape(_contiguous(_detach(tensor)), (-1,)), torch.uint8)
            if flat.device.type == "cpu":
                _write_all(fd, flat, description["offset"])
            else:
                write_through_staging(fd, description["offset"], flat, staging)
            del flat
    finally:
        os.close(fd)
    return size


def write_through_staging(fd: int, offset: int, flat: torch.Tensor, staging: "ScratchBuffer") -> None:
    """Writes the byte tensor ``flat`` (on any device) at ``offset`` of the file ``fd`` by
    way of ``staging``, in pieces no larger than its page-locked limit: the device copies
    each piece at full speed into locked memory, which is written from there."""
    nbytes = _numel(flat)
    piece = max(1, min(nbytes, staging.pinned_limit))
    for start in range(0, nbytes, piece):
        count = min(piece, nbytes - start)
        buffer = staging.take(count)[:count]
        _copy(buffer, flat[start:start + count])
        _write_all(fd, buffer, offset + start)


def _write_all(fd: int, host_bytes: torch.Tensor, offset: int) -> None:
    """pwrite of a contiguous byte tensor in host memory, however many calls it takes."""
    nbytes = _numel(host_bytes)
    view = _memory_of(host_bytes)
    done = 0
    while done < nbytes:
        done += os.pwrite(fd, view[done:], offset + done)


def _memory_of(host_bytes: torch.Tensor) -> memoryview:
    """The memory of a contiguous byte tensor in host memory, for the file calls; valid
    while the tensor is alive."""
    return memoryview((ctypes.c_char * _numel(host_bytes)).from_address(_data_ptr(host_bytes))).cast("B")


def validate(description, depth: int = 0, leaves: list | None = None) -> dict:
    """Checks an untrusted description; raises DescriptionError if it is malformed."""
    leaves = [0] if leaves is None else leaves
    leaves[0] += 1
    if leaves[0] > MAX_LEAVES or depth > MAX_DEPTH:
        raise DescriptionError("the output description is too large or too deeply nested")
    if not isinstance(description, dict) or not isinstance(description.get("kind"), str):
        raise DescriptionError("an output description entry is not an object with a kind")
    kind = description["kind"]
    if not isinstance(description.get("type"), str) or len(description["type"]) > 256:
        raise DescriptionError("an output description entry has no type name")
    if kind == "sequence":
        items = description.get("items")
        if not isinstance(items, list):
            raise DescriptionError("a sequence description has no items")
        for item in items:
            validate(item, depth + 1, leaves)
    elif kind == "tensor":
        shape = description.get("shape")
        if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            raise DescriptionError("a tensor description has an invalid shape")
        dtype = dtype_of(description.get("dtype", ""))
        for key in ("offset", "nbytes"):
            if not isinstance(description.get(key), int) or isinstance(description.get(key), bool) or description[key] < 0:
                raise DescriptionError(f"a tensor description has an invalid {key}")
        if not description.get("unreadable"):
            numel = 1
            for n in shape:
                numel *= n
            if description["nbytes"] != numel * element_size(dtype):
                raise DescriptionError("a tensor description's byte count does not match its shape and dtype")
            if description["offset"] % ALIGNMENT:
                raise DescriptionError("a tensor description's offset is not aligned")
        if not isinstance(description.get("device", ""), str):
            raise DescriptionError("a tensor description has an invalid device")
    elif kind == "scalar":
        if description.get("type") not in ("int", "float", "bool", "NoneType"):
            raise DescriptionError("a scalar description has an unknown type")
    elif kind != "other":
        raise DescriptionError(f"unknown description kind {kind!r}")
    return description


class ScratchBuffer:
    """Host memory that ``read_tensor`` reads into and ``write_slot`` stages device outputs
    in, kept from one output to the next (fresh memory for every output costs its
    allocation and first-touch zeroing each time); page-locked when the outputs come from or
    go on to a GPU, which copies to and from it faster, up to
    ``pinned_limit`` bytes: outputs of gigabytes would lock that much of the host's memory
    (rounded up to a power of two by torch's allocator) for the process's lifetime."""

    def __init__(self, pinned: bool = False, pinned_limit: int = 256 << 20):
        self.pinned = pinned
        self.pinned_limit = pinned_limit
        self.buffer: torch.Tensor | None = None

    def take(self, nbytes: int) -> torch.Tensor:
        size = max(nbytes, 1)
        if self.buffer is None or _numel(self.buffer) < size:
            self.buffer = None  # released before the larger one is allocated
            self.buffer = _empty(size, dtype=torch.uint8, pin_memory=self.pinned and size <= self.pinned_limit)
        return self.buffer[:size]


def read_tensor(path: str, description: dict, scratch: ScratchBuffer | None = None) -> torch.Tensor:
    """Reads a described tensor from a slot file into a CPU tensor: a fresh one, or a view
    of ``scratch``, valid until its next read. The file is read, not mapped: a file
    truncated by its writer gives an error, not a fault."""
    dtype = dtype_of(description["dtype"])
    shape = tuple(description["shape"])
    nbytes = description["nbytes"]
    buffer = scratch.take(nbytes) if scratch is not None else _empty(max(nbytes, 1), dtype=torch.uint8)
    if nbytes:
        with open(path, "rb", buffering=0) as stream:
            stream.seek(description["offset"])
            view = _memory_of(buffer)
            done = 0
            while done < nbytes:
                count = stream.readinto(view[done:nbytes])
                if not count:
                    raise DescriptionError("the output data is shorter than described")
                done += count
    return _reshape(_view(buffer[:nbytes], dtype), shape)


# SPDX-License-Identifier: Apache-2.0
"""Memory that the trusted side of a timing session owns and lends to the candidate's
process: an arena.

The trusted side creates the arena, maps it itself and passes a file descriptor for it to
the candidate's process over a Unix socket; from then on both processes address the same
bytes. The trusted side writes each trusted batch's inputs into the arena and poisons its
output slots there, the candidate's process computes and writes its outputs into those
slots, and the trusted side reads them back itself: nothing the candidate's process says
about its outputs is needed to check them.

The candidate's process can write anything into the arena, but it cannot take the memory
away from the trusted side:

* on CUDA the arena is physical device memory from the driver's virtual memory API
  (``cuMemCreate``), exported as a POSIX file descriptor. Legacy CUDA IPC handles cannot
  cross PID namespaces, and the two processes run in different sandboxes; a descriptor
  passed over a socket can. The memory lives as long as either side holds its handle;
* on the CPU it is a memfd sealed against shrinking and growing, so that the trusted side's
  mapping can never fault.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import mmap
import os
import socket
from typing import Any, Iterator

#: What the candidate's process sends when it wants the arena: only this, only once.
REQUEST = b"arena?"


class ArenaError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------
# The CUDA driver's virtual memory API, through ctypes (torch does not expose it).

_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
_CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class _Driver:
    """The few driver functions an arena needs. The calling thread must have a current
    context: torch's primary context, made current once torch initialized the device."""

    def __init__(self):
        try:
            self.library = ctypes.CDLL("libcuda.so.1")
        except OSError as error:
            raise ArenaError(f"the CUDA driver library cannot be loaded: {error}") from None
        self.error_name = self.library.cuGetErrorName
        self.error_name.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]

    def call(self, name: str, *arguments) -> None:
        status = getattr(self.library, name)(*arguments)
        if status != 0:
            text = ctypes.c_char_p()
            self.error_name(status, ctypes.byref(text))
            raise ArenaError(f"{name} failed: {(text.value or b'?').decode()} ({status})")

    @staticmethod
    def properties(device_index: int) -> _AllocationProp:
        prop = _AllocationProp()
        prop.type = _CU_MEM_ALLOCATION_TYPE_PINNED
        prop.requestedHandleTypes = _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        prop.location = _Location(_CU_MEM_LOCATION_TYPE_DEVICE, device_index)
        return prop

    def granularity(self, device_index: int) -> int:
        value = ctypes.c_size_t()
        prop = self.properties(device_index)
        self.call("cuMemGetAllocationGranularity", ctypes.byref(value), ctypes.byref(prop),
                  ctypes.c_int(_CU_MEM_ALLOC_GRANULARITY_MINIMUM))
        return int(value.value)

    def create(self, device_index: int, size: int) -> int:
        handle = ctypes.c_ulonglong()
        prop = self.properties(device_index)
        self.call("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop),
                  ctypes.c_ulonglong(0))
        return int(handle.value)

    def export(self, handle: int) -> int:
        descriptor = ctypes.c_int(-1)
        self.call("cuMemExportToShareableHandle", ctypes.byref(descriptor), ctypes.c_ulonglong(handle),
                  ctypes.c_int(_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), ctypes.c_ulonglong(0))
        return int(descriptor.value)

    def import_descriptor(self, descriptor: int) -> int:
        handle = ctypes.c_ulonglong()
        self.call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(descriptor),
                  ctypes.c_int(_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return int(handle.value)

    def map(self, handle: int, size: int, device_index: int) -> int:
        address = ctypes.c_ulonglong()
        self.call("cuMemAddressReserve", ctypes.byref(address), ctypes.c_size_t(size), ctypes.c_size_t(0),
                  ctypes.c_ulonglong(0), ctypes.c_ulonglong(0))
        try:
            self.call("cuMemMap", ctypes.c_ulonglong(address.value), ctypes.c_size_t(size), ctypes.c_size_t(0),
                      ctypes.c_ulonglong(handle), ctypes.c_ulonglong(0))
        except ArenaError:
            self.call("cuMemAddressFree", ctypes.c_ulonglong(address.value), ctypes.c_size_t(size))
            raise
        access = _AccessDesc(_Location(_CU_MEM_LOCATION_TYPE_DEVICE, device_index), _CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        self.call("cuMemSetAccess", ctypes.c_ulonglong(address.value), ctypes.c_size_t(size), ctypes.byref(access),
                  ctypes.c_size_t(1))
        return int(address.value)

    def unmap(self, address: int, size: int) -> None:
        self.call("cuMemUnmap", ctypes.c_ulonglong(address), ctypes.c_size_t(size))
        self.call("cuMemAddressFree", ctypes.c_ulonglong(address), ctypes.c_size_t(size))

    def release(self, handle: int) -> None:
        self.call("cuMemRelease", ctypes.c_ulonglong(handle))


class _DeviceBytes:
    """A device address range in the form torch.as_tensor takes without copying."""

    def __init__(self, address: int, size: int):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False),
                                         "version": 3, "strides": None}


# ---------------------------------------------------------------------------------------


class Arena:
    """``size`` bytes that both sides of a timing session address. ``bytes`` is a flat
    uint8 tensor over them on the session's device; ``view`` cuts typed tensors out of it."""

    def __init__(self, torch: Any, kind: str, device_index: int, size: int, descriptor: int, owner: bool):
        self.torch = torch
        self.kind = kind
        self.device_index = device_index
        self.size = size
        self.descriptor = descriptor
        self.owner = owner
        self._driver: _Driver | None = None
        self._handle: int | None = None
        self._address: int | None = None
        self._mapping: mmap.mmap | None = None
        self.bytes = None

    # -- creation ---------------------------------------------------------------------
    @classmethod
    def create(cls, torch: Any, kind: str, size: int, device_index: int = 0) -> "Arena":
        """A new arena of at least ``size`` bytes, owned by the calling (trusted) process."""
        if size <= 0:
            raise ArenaError(f"an arena needs a positive size, not {size}")
        if kind == "cpu":
            descriptor = os.memfd_create("cuda-agent-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            try:
                os.ftruncate(descriptor, size)
                fcntl.fcntl(descriptor, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
                arena = cls(torch, kind, device_index, size, descriptor, owner=True)
                arena._map_host()
            except BaseException:
                os.close(descriptor)
                raise
            return arena
        if kind != "cuda":
            raise ArenaError(f"unknown device kind {kind!r}")
        driver = _Driver()
        granularity = driver.granularity(device_index)
        size = -(-size // granularity) * granularity
        handle = driver.create(device_index, size)
        try:
            descriptor = driver.export(handle)
        except BaseException:
            driver.release(handle)
            raise
        arena = cls(torch, kind, device_index, size, descriptor, owner=True)
        arena._driver, arena._handle = driver, handle
        try:
            arena._map_device()
        except BaseException:
            arena.close()
            raise
        return arena

    @classmethod
    def attach(cls, torch: Any, kind: str, descriptor: int, size: int, device_index: int = 0) -> "Arena":
        """The arena behind ``descriptor`` (received from the trusted side), mapped here."""
        arena = cls(torch, kind, device_index, size, descriptor, owner=False)
        try:
            if kind == "cpu":
                actual = os.fstat(descriptor).st_size
                if actual < size:
                    raise ArenaError(f"the arena holds {actual} bytes, not the {size} announced")
                arena._map_host()
            elif kind == "cuda":
                arena._driver = _Driver()
                arena._handle = arena._driver.import_descriptor(descriptor)
                arena._map_device()
            else:
                raise ArenaError(f"unknown device kind {kind!r}")
        except BaseException:
            arena.close()
            raise
        return arena

    def _map_host(self) -> None:
        self._mapping = mmap.mmap(self.descriptor, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.bytes = self.torch.frombuffer(self._mapping, dtype=self.torch.uint8)

    def _map_device(self) -> None:
        self._address = self._driver.map(self._handle, self.size, self.device_index)
        self.bytes = self.torch.as_tensor(_DeviceBytes(self._address, self.size), device=f"cuda:{self.device_index}")
        if self.bytes.data_ptr() != self._address:
            raise ArenaError("torch copied the arena instead of viewing it")

    # -- use --------------------------------------------------------------------------
    def view(self, offset: int, shape, dtype) -> Any:
        """A tensor of ``shape`` and ``dtype`` at byte ``offset`` (contiguous)."""
        torch = self.torch
        count = 1
        for extent in shape:
            count *= int(extent)
        itemsize = torch.empty((), dtype=dtype).element_size()
        end = offset + count * itemsize
        if offset < 0 or end > self.size or offset % itemsize:
            raise ArenaError(f"{count} x {dtype} at offset {offset} do not fit the arena of {self.size} bytes")
        return self.bytes[offset:end].view(dtype).view(tuple(int(extent) for extent in shape))

    def fill(self, start: int, end: int, value: int) -> None:
        """Sets bytes [start, end) to ``value``. On the CPU through the mapping itself: a
        torch fill of that size would start the intra-op threads, which keep spinning on the
        cores the candidate's process is about to use."""
        if not 0 <= start <= end <= self.size:
            raise ArenaError(f"bytes {start} to {end} are not in the arena of {self.size} bytes")
        if self._mapping is not None:
            self._mapping[start:end] = bytes([value]) * (end - start)
        else:
            self.bytes[start:end].fill_(value)

    def close(self) -> None:
        self.bytes = None
        if self._mapping is not None:
            try:
                self._mapping.close()
            except BufferError:  # a tensor still views it; the process's end unmaps it
                pass
            self._mapping = None
        if self._driver is not None:
            if self._address is not None:
                self._driver.unmap(self._address, self.size)
                self._address = None
            if self._handle is not None:
                self._driver.release(self._handle)
                self._handle = None
        if self.descriptor >= 0:
            os.close(self.descriptor)
            self.descriptor = -1


# ---------------------------------------------------------------------------------------
# Handing the descriptor over: the trusted side listens on a socket in a directory only it
# can write, the candidate's process connects, asks once, and receives the descriptor.


@contextlib.contextmanager
def _addressable(path: str) -> Iterator[str]:
    """``path`` in a form a Unix socket address holds (108 bytes at most): through a
    descriptor of its directory when the path itself is longer."""
    if len(os.fsencode(path)) < 100:
        yield path
        return
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{directory}/{os.path.basename(path)}"
    finally:
        os.close(directory)


class ArenaOffer:
    """The trusted side's listening socket. Serves one connection, then closes."""

    def __init__(self, path: str):
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            with _addressable(path) as address:
                self.listener.bind(address)
            os.chmod(path, 0o666)  # the candidate's process runs as another user
            self.listener.listen(1)
        except BaseException:
            self.listener.close()
            raise

    def hand_over(self, arena: Arena, timeout_s: float) -> None:
        self.listener.settimeout(timeout_s)
        try:
            connection, _ = self.listener.accept()
        except socket.timeout:
            raise ArenaError(f"the candidate's process did not ask for the arena within {timeout_s:.0f} s") from None
        finally:
            self.close()
        with connection:
            connection.settimeout(timeout_s)
            request = connection.recv(len(REQUEST))
            if request != REQUEST:
                raise ArenaError("the candidate's process asked for the arena in a malformed way")
            socket.send_fds(connection, [str(arena.size).encode()], [arena.descriptor])

    def close(self) -> None:
        self.listener.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def receive_arena(torch: Any, kind: str, path: str, device_index: int, timeout_s: float) -> Arena:
    """The candidate's side: asks the trusted side's socket at ``path`` for the arena."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as connection:
        connection.settimeout(timeout_s)
        with _addressable(path) as address:
            connection.connect(address)
        connection.sendall(REQUEST)
        message, descriptors, _, _ = socket.recv_fds(connection, 64, 1)
    if len(descriptors) != 1:
        for descriptor in descriptors:
            os.close(descriptor)
        raise ArenaError("the trusted side sent no arena descriptor")
    try:
        size = int(message.decode())
    except ValueError:
        os.close(descriptors[0])
        raise ArenaError("the trusted side announced a malformed arena size") from None
    return Arena.attach(torch, kind, descriptors[0], size, device_index)

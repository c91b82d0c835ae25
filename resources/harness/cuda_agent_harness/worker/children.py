# SPDX-License-Identifier: Apache-2.0
"""One child of the worker: the private pipes of its report and its output (kept to a
tail), the context a handler runs in, and the prepared child that readies the device
and waits for its request."""

from __future__ import annotations

import json
import os
import sys
import time

from ..channel import encode_for_host, write_all
from .processes import _kill_group


#: Caps on what a child may send back; the rest is dropped.
REPORT_LIMIT = 64 << 20
OUTPUT_LIMIT = 64 << 10


class TailBuffer:
    """Keeps the head and the tail of a stream."""

    def __init__(self, limit: int):
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        elided = self.total - len(self.head) - len(self.tail)
        middle = f"\n[... {elided} bytes elided ...]\n".encode() if elided > 0 else b""
        return (bytes(self.head) + middle + bytes(self.tail)).decode("utf-8", "replace")


class RequestContext:
    """What a handler gets besides its arguments."""

    def __init__(self, request_id: str, report_fd: int, deadline: float, device: str, role: str,
                 cuda_initialized_at_fork: bool = False):
        self.request_id = request_id
        self.deadline = deadline
        self.device = device
        self.role = role
        #: Whether CUDA was initialised in the worker when this child was forked (it must
        #: not be: a forked child cannot use a parent's CUDA context).
        self.cuda_initialized_at_fork = cuda_initialized_at_fork
        self._report_fd = report_fd

    def emit(self, event: dict) -> None:
        """Sends an event to the host while the handler runs."""
        write_all(self._report_fd, encode_for_host({"event": event}))

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()


class Child:
    """A forked child as the worker sees it: its pid, the read ends of its report and output
    pipes, and (for a prepared child still waiting) the write end of its request pipe."""

    def __init__(self, pid: int, report_r: int, output_r: int, request_w: int | None):
        self.pid = pid
        self.report_r = report_r
        self.output_r = output_r
        self.request_w = request_w

    def hand(self, request: dict, deadline: float) -> bool:
        """Gives a prepared child its request; False if the child is gone."""
        message = {"id": request.get("id", ""), "handler": request.get("handler", ""),
                   "args": request.get("args") or {}, "deadline": deadline}
        try:
            write_all(self.request_w, encode_for_host(message))
        except OSError:  # BrokenPipeError: it died while preparing
            return False
        finally:
            os.close(self.request_w)
            self.request_w = None
        return True

    def close(self) -> None:
        for fd in (self.report_r, self.output_r, self.request_w):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.report_r = self.output_r = self.request_w = None

    def abandon(self) -> None:
        """Kills the child and its group and reaps it."""
        _kill_group(self.pid)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self.close()


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _await_request(request_r: int) -> tuple[dict, float] | None:
    """Blocks until the worker writes this child's request and closes the pipe; None if it
    closed the pipe without one."""
    data = bytearray()
    while True:
        try:
            chunk = os.read(request_r, 1 << 16)
        except InterruptedError:
            continue
        if not chunk:
            break
        data += chunk
    os.close(request_r)
    if not data.strip():
        return None
    message = json.loads(data)
    return message, float(message["deadline"])


def prepare_child(device: str) -> None:
    """What a verification's handlers do first on ``device``, done ahead of the request:
    the CUDA context and allocator, torch's thread pools, the first entry into its dispatch
    modes. Not the profiler: the candidate's side-stream checks read the events of its
    profiled call, and a session run here first would make that call the process's second
    (torch warns that a later session reports its own cycle only). A failure is left for
    the handler, which meets it again and reports it."""
    try:
        import torch

        from ..checks import hygiene
        from .. import models
        from ..checks.guard import ForwardGuard

        models.setup_device(device)
        hygiene.warm_thread_pools(device)
        with torch.no_grad(), ForwardGuard():
            torch.empty(1, device=device)
    except Exception:  # noqa: BLE001 - reported by the handler that needs the device
        pass


def _drain(fd: int, output: TailBuffer) -> None:
    """Adds what the pipe holds now to ``output``, without waiting for more."""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        if not chunk:
            return
        output.add(chunk)

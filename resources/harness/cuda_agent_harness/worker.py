# SPDX-License-Identifier: Apache-2.0
"""A warm worker: imports torch once (without initialising CUDA), then serves requests,
each in a child forked for it.

The child for the next verification or timing request is forked ahead of it and prepares
the device (on CUDA: the context, torch's thread pools and dispatch modes; about half a
second), then blocks until its request arrives over a private pipe. It has run no request
and imported nothing a request names, so it is as clean as a child forked on demand; what
it saves is the wait. Handlers registered with ``prepared=True`` get it; the others (static
checks) get a child forked on arrival, and the prepared one keeps waiting. The next one is
forked as soon as one is handed out, except to a handler registered with ``alone=True``
(timing): nothing else of the worker may run beside those, so they also start only once
every earlier child has exited, and the next prepared child comes after them.
``--no-prepared-child`` forks on demand only.

A child that reports its result has nothing left to do but exit, which takes a CUDA process
0.1 to 0.3 s (it lets go of the device): the worker ends it at once and replies, and reaps
it later. Processes it started are found and counted at that moment (``stragglers``). A
host about to time something sends ``settle`` first, to every worker, so that no such exit
overlaps its measurement.

Protocol: JSON lines. The host writes requests into the ``--requests`` FIFO and reads
replies from the ``--replies`` FIFO; both are opened once at start, after which the host
removes them from the filesystem, so no process started later can reach them.

Requests:
  {"id": "...", "handler": "name", "args": {...}, "timeout_ms": 60000}
  {"cancel": "<id>"}        ends the child of that request
  {"id": "...", "settle": true}   waits until every earlier child has exited
  {"shutdown": true}

Replies:
  {"event": "ready", "pid": ..., "torch": "2.x", "handlers": [...]}     once, at start
  {"id": "...", "event": {...}}                                          while a child runs
  {"id": "...", "done": true, "result": {...} | null, "error": {...} | null,
   "exit_code": int | null, "signal": int | null, "timed_out": bool, "cancelled": bool,
   "stragglers": int, "ended_after_report": bool, "duration_ms": float, "reported_ms": float | null,
   "output": "tail of stdout and stderr"}
  A child ended after its report has exit_code and signal null.

What a child reports (``result``, ``error``, events) is relayed as it was written; the
fields describing how the child ended (exit status, deadline, processes it left behind)
are the worker's own observations. A child never holds the worker's channel: it gets
private pipes for its report and its output, and everything it leaves running is killed
before the reply is sent (the worker is a child subreaper, so orphans come back to it).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import signal
import sys
import time
import traceback

from . import PROTOCOL_VERSION, hygiene, registry
from .channel import LineReader, encode_for_host, write_all

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36

#: Caps on what a child may send back; the rest is dropped.
REPORT_LIMIT = 64 << 20
OUTPUT_LIMIT = 64 << 10


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


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


def _reap_all(keep: set[int]) -> tuple[int, set[int]]:
    """Reaps every child that has ended: (how many were not in ``keep``, the pids reaped)."""
    reaped: set[int] = set()
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        reaped.add(pid)
    return len(reaped - keep), reaped


def kill_leftovers(process_group: int, keep: set[int]) -> tuple[int, set[int]]:
    """Kills whatever a finished child left running, except the worker's children in
    ``keep``; returns how many processes that was, and every pid reaped meanwhile."""
    try:
        os.killpg(process_group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    left = 0
    reaped: set[int] = set()
    for _ in range(200):
        count, more = _reap_all(keep)
        left, reaped = left + count, reaped | more
        alive = [pid for pid in hygiene.child_processes() if pid not in keep]
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)
    count, more = _reap_all(keep)
    return left + count, reaped | more


def descendants(roots: list[int]) -> set[int]:
    """Every process below ``roots`` (not the roots themselves)."""
    found: set[int] = set()
    frontier = list(roots)
    while frontier:
        for pid in hygiene.child_processes(frontier.pop()):
            if pid not in found:
                found.add(pid)
                frontier.append(pid)
    return found


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


class Worker:
    def __init__(self, role: str, device: str, requests_fd: int, replies_fd: int, scrub: list[str],
                 prepared_child: bool = True):
        self.role = role
        self.device = device
        self.requests = LineReader(requests_fd, line_limit=None)  # the host is trusted; no cap over a life
        self.replies_fd = replies_fd
        self.pending: list[dict] = []
        self.scrub = {path: set(_listdir(path)) for path in scrub}
        self.prepared_child = prepared_child
        self.spare: Child | None = None
        #: The child of the request being served.
        self.running: Child | None = None
        #: Children ended after their report and not reaped yet: their exit (on CUDA, 0.1 to
        #: 0.3 s of letting go of the device) overlaps what comes next.
        self.exiting: set[int] = set()

    def reply(self, message: dict) -> None:
        write_all(self.replies_fd, encode_for_host(message))

    def next_request(self) -> dict | None:
        while not self.pending:
            if self.requests.closed:
                return None
            select.select([self.requests.fd], [], [])
            for line in self.requests.read_available():
                self._queue(line)
        return self.pending.pop(0)

    def _queue(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            self.reply({"event": "protocol_error", "message": "a request is not valid JSON"})
            return
        if isinstance(message, dict):
            self.pending.append(message)

    def serve(self) -> None:
        try:
            while True:
                self._keep_spare()
                request = self.next_request()
                if request is None or request.get("shutdown"):
                    return
                if "cancel" in request:
                    continue  # nothing runs: the request it names is over already
                if request.get("settle"):
                    self.reply(self._settled(str(request.get("id", ""))))
                    continue
                self.run(request)
        finally:
            if self.spare is not None:
                self.spare.abandon()
                self.spare = None
            self._settle(timeout_s=5.0)

    def _keep_spare(self) -> None:
        """Forks the prepared child of the next request, unless one waits already."""
        if self.prepared_child and self.spare is None:
            self.spare = self._fork(None)

    def _known_children(self) -> set[int]:
        known = set(self.exiting)
        for child in (self.spare, self.running):
            if child is not None:
                known.add(child.pid)
        return known

    def _collect(self) -> None:
        """Reaps the children that have exited; kills processes of earlier requests that
        came back to the worker since (already counted as their stragglers)."""
        _, reaped = _reap_all(set())
        current = {child.pid for child in (self.spare, self.running) if child is not None}
        self.exiting = {pid for pid in self.exiting - reaped - current if _exists(pid)}
        for pid in set(hygiene.child_processes()) - self._known_children():
            _kill_group(pid)
            self.exiting.add(pid)

    def _settle(self, timeout_s: float = 30.0) -> float:
        """Waits until every child ended after its report has exited (or ``timeout_s``);
        returns the milliseconds waited."""
        started = time.monotonic()
        self._collect()
        while self.exiting and time.monotonic() - started < timeout_s:
            time.sleep(0.002)
            self._collect()
        return (time.monotonic() - started) * 1000.0

    def _settled(self, request_id: str) -> dict:
        """The reply to a settle request: the host asks before it times anything, so that no
        earlier child of this worker is still letting go of the device."""
        waited_ms = self._settle()
        return _worker_reply(request_id, result={"waited_ms": waited_ms, "exiting": len(self.exiting)},
                             duration_ms=waited_ms)

    def _fork(self, request: tuple[dict, float] | None) -> Child:
        """Forks a child for ``request`` (its message and deadline), or, with None, a
        prepared child that waits for its request on a pipe of its own."""
        report_r, report_w = os.pipe()
        output_r, output_w = os.pipe()
        request_r = request_w = None
        if request is None:
            request_r, request_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            inherited = [report_r, output_r, self.requests.fd, self.replies_fd]
            if request_w is not None:
                inherited.append(request_w)
            for other in (self.spare, self.running):  # other children's pipes are not this one's business
                if other is not None:
                    inherited += [fd for fd in (other.report_r, other.output_r, other.request_w) if fd is not None]
            self._child(report_w, output_w, request_r, inherited, request)
        os.close(report_w)
        os.close(output_w)
        if request_r is not None:
            os.close(request_r)
        os.set_blocking(report_r, False)
        os.set_blocking(output_r, False)
        return Child(pid, report_r, output_r, request_w)

    def _end_after_report(self, pid: int) -> int:
        """Ends a child that has reported its result, without waiting for its exit: it and
        every process it started are killed now, and those processes are counted. They are
        found below the child and among the worker's own children (where they land when
        their parent exits first): a process that moves from one list to the other while
        both are read is seen in one of them."""
        _kill_group(pid)
        left = descendants([pid])
        returned = set(hygiene.child_processes()) - self._known_children() - {pid}
        left |= returned | descendants(sorted(returned))
        for each in left:
            _kill_group(each)
        self.exiting |= {pid} | left
        return len(left)

    def run(self, request: dict) -> None:
        request_id = str(request.get("id", ""))
        name = request.get("handler", "")
        function = registry.lookup(name)
        if function is None:
            self.reply(_worker_reply(request_id, error={
                "type": "UnknownHandler", "message": f"no handler named {name!r}; known: {', '.join(registry.names())}"}))
            return
        alone = registry.runs_alone(name)
        if alone:
            self._settle()
        else:
            self._collect()
        timeout = max(0.001, float(request.get("timeout_ms", 600_000)) / 1000.0)
        started = time.monotonic()
        deadline = started + timeout
        child = None
        if self.spare is not None and registry.runs_prepared(name):
            child, self.spare = self.spare, None
            if not child.hand(request, deadline):
                child.abandon()
                child = None
        if child is None:
            child = self._fork((request, deadline))
        self.running = child
        if not alone:  # the next request's child prepares while this one runs
            self._keep_spare()
        try:
            self._serve_child(request_id, child, started, deadline)
        finally:
            self.running = None

    def _serve_child(self, request_id: str, child: Child, started: float, deadline: float) -> None:
        pid, report_r, output_r = child.pid, child.report_r, child.output_r
        report = LineReader(report_r, line_limit=None, total_limit=REPORT_LIMIT)
        output = TailBuffer(OUTPUT_LIMIT)
        output_text, output_total = "", 0
        result = None
        error = None
        timed_out = cancelled = ended_after_report = False
        status = None
        stragglers = 0
        reported_at = None  # when the result arrived: the rest of duration_ms is the child's exit
        while True:
            readable = [fd for fd, closed in ((report_r, report.closed), (output_r, output is None)) if not closed]
            if status is not None and not readable:
                break
            watch = readable + [self.requests.fd] if not self.requests.closed else readable
            wait = 0.05 if status is None else 0.2
            ready, _, _ = select.select(watch, [], [], wait)
            if report_r in ready:
                for line in report.read_available():
                    result, error = self._child_line(request_id, line, result, error)
                    if reported_at is None and (result is not None or error is not None):
                        reported_at = time.monotonic()
            if output_r in ready and output is not None:
                try:
                    chunk = os.read(output_r, 1 << 16)
                except (BlockingIOError, InterruptedError):
                    chunk = None
                if chunk == b"":
                    output_text = output.text()
                    output_total = output.total
                    output = None
                elif chunk:
                    output.add(chunk)
            if self.requests.fd in ready:
                for line in self.requests.read_available():
                    self._queue(line)
                for queued in list(self.pending):
                    if queued.get("cancel") == request_id or queued.get("shutdown"):
                        if queued.get("cancel") == request_id:
                            self.pending.remove(queued)
                        if status is None:
                            cancelled = True
                            _kill_group(pid)
            if status is None and result is not None and not (timed_out or cancelled):
                # The child writes its result last, after its output: it has nothing left to
                # do but exit, and the reply need not wait for that.
                stragglers = self._end_after_report(pid)
                ended_after_report = True
                if output is not None:
                    _drain(output_r, output)
                break
            if status is None:
                finished, code = os.waitpid(pid, os.WNOHANG)
                if finished:
                    status = code
                    stragglers, reaped = kill_leftovers(pid, keep=self._known_children() - {pid})
                    self.exiting -= reaped
                    drain_deadline = time.monotonic() + 2.0
                elif time.monotonic() > deadline:
                    timed_out = True
                    _kill_group(pid)
            elif time.monotonic() > drain_deadline:
                break
        if output is not None:
            output_text, output_total = output.text(), output.total
        child.close()
        self._scrub()
        exit_code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None
        killed_by = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None
        self.reply({"id": request_id, "done": True, "result": result, "error": error, "exit_code": exit_code,
                    "signal": killed_by, "timed_out": timed_out, "cancelled": cancelled, "stragglers": stragglers,
                    "ended_after_report": ended_after_report,
                    "duration_ms": (time.monotonic() - started) * 1000.0,
                    "reported_ms": None if reported_at is None else (reported_at - started) * 1000.0,
                    "output": output_text,
                    "output_bytes": output_total})

    def _child_line(self, request_id, line, result, error):
        try:
            message = json.loads(line)
        except ValueError:
            return result, {"type": "MalformedReport", "message": "the child wrote a report line that is not JSON"}
        if not isinstance(message, dict):
            return result, error
        if "event" in message:
            self.reply({"id": request_id, "event": message["event"]})
        elif "result" in message:
            result = message["result"]
        elif "error" in message:
            error = message["error"]
        return result, error

    def _child(self, report_w: int, output_w: int, request_r: int | None, inherited: list[int],
               request: tuple[dict, float] | None) -> None:
        """The forked child: leaves the worker's process group and descriptors, then runs
        ``request``; a prepared child (``request`` None) first prepares the device and
        waits for its request on ``request_r``. Never returns."""
        code = 1
        cuda_at_fork = _cuda_initialized()
        try:
            os.setpgid(0, 0)
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(output_w, 1)
            os.dup2(output_w, 2)
            for fd in [null, output_w] + inherited:
                os.close(fd)
            sys.stdout = open(1, "w", buffering=1, closefd=False)
            sys.stderr = open(2, "w", buffering=1, closefd=False)
            if request is None:
                prepare_child(self.device)
                request = _await_request(request_r)
                if request is None:  # the worker gave this child up
                    code = 0
                    return
            message, deadline = request
            function = registry.lookup(message.get("handler", ""))
            context = RequestContext(str(message.get("id", "")), report_w, deadline, self.device, self.role,
                                     cuda_at_fork)
            result = function(message.get("args") or {}, context)
            sys.stdout.flush()
            sys.stderr.flush()
            write_all(report_w, encode_for_host({"result": result}))  # the last thing this child does
            code = 0
        except BaseException as exception:  # the child reports everything and always ends here
            try:
                message = {"error": {"type": type(exception).__name__, "message": str(exception),
                                     "traceback": traceback.format_exc(limit=20)}}
                write_all(report_w, encode_for_host(message))
            except BaseException:
                pass
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:
                pass
            os._exit(code)

    def _scrub(self) -> None:
        for path, initial in self.scrub.items():
            for name in _listdir(path):
                if name not in initial:
                    _remove_tree(os.path.join(path, name))


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

        from . import hygiene, models
        from .guard import ForwardGuard

        models.setup_device(device)
        hygiene.warm_thread_pools(device)
        with torch.no_grad(), ForwardGuard():
            torch.empty(1, device=device)
    except Exception:  # noqa: BLE001 - reported by the handler that needs the device
        pass


def _worker_reply(request_id: str, result: dict | None = None, error: dict | None = None,
                  duration_ms: float = 0.0) -> dict:
    """The reply to a request the worker answers itself, without a child."""
    return {"id": request_id, "done": True, "result": result, "error": error, "exit_code": None, "signal": None,
            "timed_out": False, "cancelled": False, "stragglers": 0, "ended_after_report": False,
            "duration_ms": duration_ms, "output": ""}


def _exists(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie not yet reaped does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _remove_tree(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            for name in _listdir(path):
                _remove_tree(os.path.join(path, name))
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        pass


def _seconds_since_process_start() -> float | None:
    """Seconds since this process was created (interpreter start-up included)."""
    try:
        with open("/proc/self/stat") as stat:
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            now = float(uptime.read().split()[0])
        return max(0.0, now - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def _warm_up(device: str, startup: dict) -> str:
    """Imports what handlers need, so that a forked child starts with it loaded. CUDA is
    not initialised here: a forked child could not use it. ``startup`` gets the seconds
    each step took."""
    mark = time.monotonic()
    import torch

    startup["import_torch_s"] = time.monotonic() - mark
    mark = time.monotonic()
    import torch.nn  # noqa: F401
    import torch.nn.functional  # noqa: F401
    import torch.profiler  # noqa: F401
    import torch.utils._python_dispatch  # noqa: F401

    registry.load_handlers()
    # The first use of torch's dispatch and function modes imports a large part of torch
    # (torch._dynamo among others): do it once here rather than in every child.
    from .guard import ForwardGuard

    with torch.no_grad(), ForwardGuard():
        torch.empty(1)
    import torch.autograd.profiler_util  # noqa: F401
    startup["warm_up_s"] = time.monotonic() - mark
    if device == "cuda" and torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised in the worker before forking; children could not use it")
    return torch.__version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cuda_agent_harness.worker")
    parser.add_argument("--role", required=True)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--requests", required=True)
    parser.add_argument("--replies", required=True)
    parser.add_argument("--scrub", action="append", default=[],
                        help="a directory whose new entries are removed after every request")
    parser.add_argument("--no-prepared-child", dest="prepared_child", action="store_false",
                        help="fork each request's child when the request arrives, not ahead of it")
    options = parser.parse_args(argv)

    startup = {"before_main_s": _seconds_since_process_start()}
    # Children cannot attach to the worker, read its memory or open its descriptors through
    # /proc (all need a dumpable target), and the processes they leave behind come back to it.
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    requests_fd = os.open(options.requests, os.O_RDONLY | os.O_CLOEXEC)
    replies_fd = os.open(options.replies, os.O_WRONLY | os.O_CLOEXEC)
    worker = Worker(options.role, options.device, requests_fd, replies_fd, options.scrub, options.prepared_child)
    try:
        version = _warm_up(options.device, startup)
    except BaseException as exception:
        worker.reply({"event": "failed", "message": f"{type(exception).__name__}: {exception}",
                      "traceback": traceback.format_exc(limit=20)})
        return 1
    worker.reply({"event": "ready", "pid": os.getpid(), "torch": version, "protocol": PROTOCOL_VERSION,
                  "role": options.role, "device": options.device, "python": sys.version.split()[0],
                  "handlers": registry.names(), "startup": startup})
    try:
        worker.serve()
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

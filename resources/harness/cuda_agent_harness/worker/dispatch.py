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

import json
import os
import select
import signal
import sys
import time
import traceback

from .. import registry
from ..checks import hygiene
from ..channel import LineReader, encode_for_host, write_all
from .children import (
    Child, OUTPUT_LIMIT, REPORT_LIMIT, RequestContext, TailBuffer, _await_request, _cuda_initialized, _drain,
    prepare_child,
)
from .processes import (
    _PR_SET_PDEATHSIG, _exists, _kill_group, _listdir, _prctl, _reap_all, _remove_tree, descendants,
    kill_leftovers,
)


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


def _worker_reply(request_id: str, result: dict | None = None, error: dict | None = None,
                  duration_ms: float = 0.0) -> dict:
    """The reply to a request the worker answers itself, without a child."""
    return {"id": request_id, "done": True, "result": result, "error": error, "exit_code": None, "signal": None,
            "timed_out": False, "cancelled": False, "stragglers": 0, "ended_after_report": False,
            "duration_ms": duration_ms, "output": ""}

# SPDX-License-Identifier: Apache-2.0
"""JSON lines over file descriptors: the one wire format between the harness's processes.

Three conversations use it: a verification's reference and candidate processes
(``verify/session.py``), a timing session's two sides (``timing/wire.py``), and a warm
worker with its host and with the children it forks (``worker/``). Each message is one JSON
object on one line. What arrives from a candidate's process is untrusted: a line that is not
a JSON object, or one longer than the reader's limit, is a ``MalformedMessage``, never a
crash of the reader.

Python peers keep Python's spellings of non-finite numbers (``NaN``, ``Infinity``), which
they read back as floats; what goes to the C++ host is ``encode_for_host``'d, because the
host's parser refuses them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import time

#: A message from the other side longer than this is refused.
MESSAGE_LIMIT = 4 << 20


class ChannelClosed(EOFError):
    """The other side closed the channel (its process ended)."""


class ChannelTimeout(TimeoutError):
    """No message arrived in time."""


class MalformedMessage(ValueError):
    """The other side sent a line that is not a JSON object, or one beyond the limit."""


def json_safe(value):
    """``value`` with non-finite floats spelled as strings ("nan", "inf", "-inf")."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def encode(message: dict) -> bytes:
    """One line for a Python peer."""
    return json.dumps(message).encode() + b"\n"


def encode_for_host(message: dict) -> bytes:
    """One line for the C++ host: strict JSON, non-finite floats as strings."""
    return (json.dumps(json_safe(message), allow_nan=False) + "\n").encode()


def decode(line: bytes) -> dict:
    try:
        message = json.loads(line)
    except ValueError as error:
        raise MalformedMessage("the other process sent a message that is not JSON") from error
    if not isinstance(message, dict):
        raise MalformedMessage("the other process sent a message that is not an object")
    return message


def write_all(fd: int, data: bytes) -> None:
    """Writes all of ``data``; a closed reading end raises ``BrokenPipeError``."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[written:]


class LineReader:
    """Splits what arrives on a descriptor into lines, one read at a time.

    ``line_limit`` bounds a line still waiting for its newline (beyond it: a
    ``MalformedMessage``); ``total_limit`` bounds everything read over the reader's life
    (beyond it the rest is dropped, which is how a child's report is capped). A line that
    end of file cuts short is still returned."""

    def __init__(self, fd: int, *, line_limit: int | None = MESSAGE_LIMIT, total_limit: int | None = None):
        self.fd = fd
        self.line_limit = line_limit
        self.total_limit = total_limit
        self.buffer = bytearray()
        self.total = 0
        self.closed = False

    def read_available(self) -> list[bytes]:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return []
        if not chunk:
            self.closed = True
            rest = bytes(self.buffer)
            self.buffer.clear()
            return [rest] if rest.strip() else []
        self.total += len(chunk)
        if self.total_limit is None or self.total <= self.total_limit:
            self.buffer += chunk
        lines = []
        while (newline := self.buffer.find(b"\n")) >= 0:
            lines.append(bytes(self.buffer[:newline]))
            del self.buffer[: newline + 1]
        if self.line_limit is not None and len(self.buffer) > self.line_limit:
            raise MalformedMessage(f"the other process sent a message larger than {self.line_limit} bytes")
        return lines


class JsonLines:
    """A conversation over a descriptor to read and one to write.

    ``writer_may_open_late``: the incoming descriptor was opened without waiting for a
    writer (a FIFO opened non-blocking), so end of file before the first message only means
    that the other side has not opened its end yet."""

    def __init__(self, incoming: int, outgoing: int, *, line_limit: int = MESSAGE_LIMIT,
                 writer_may_open_late: bool = False):
        self.incoming = incoming
        self.outgoing = outgoing
        self.reader = LineReader(incoming, line_limit=line_limit)
        self.pending: list[bytes] = []
        self.heard = not writer_may_open_late

    def send(self, message: dict) -> None:
        try:
            write_all(self.outgoing, encode(message))
        except BrokenPipeError as error:
            raise ChannelClosed("the other process closed the session") from error

    def receive(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            while self.pending:
                line = self.pending.pop(0)
                if line.strip():
                    self.heard = True
                    return decode(line)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelTimeout(f"no message within {timeout_s:.1f} s")
            # Until the other side has spoken, look again soon: its writing end may open late.
            ready, _, _ = select.select([self.incoming], [], [], min(remaining, 1.0 if self.heard else 0.05))
            if not ready:
                continue
            self.pending += self.reader.read_available()
            if self.reader.closed and not self.pending:
                if self.heard:
                    raise ChannelClosed("the other process closed the session")
                self.reader.closed = False  # its writing end is not open yet
                time.sleep(0.01)

    def close(self) -> None:
        for descriptor in (self.incoming, self.outgoing):
            with contextlib.suppress(OSError):
                os.close(descriptor)

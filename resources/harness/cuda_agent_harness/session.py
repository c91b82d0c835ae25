# SPDX-License-Identifier: Apache-2.0
"""The channel between the reference process and the candidate process of one
verification: two FIFOs the host creates in the session directory (``to_reference`` and
``to_candidate``), carrying JSON lines. The candidate writes its outputs into slot files in
its output directory and announces them; the reference hands out each call (``call``),
reads and compares the outputs, and ends with ``done`` or ``stop``. Whatever arrives from
the candidate is untrusted data."""

from __future__ import annotations

import json
import os
import select
import time

#: A message from the candidate longer than this is refused.
MESSAGE_LIMIT = 4 << 20


class SessionClosed(Exception):
    """The other side closed the channel (its process ended)."""


class SessionTimeout(Exception):
    pass


class Session:
    def __init__(self, directory: str, side: str, deadline: float):
        self.deadline = deadline
        to_reference = os.path.join(directory, "to_reference")
        to_candidate = os.path.join(directory, "to_candidate")
        # Both sides open in the same order, so the blocking opens pair up.
        if side == "reference":
            self.incoming = os.open(to_reference, os.O_RDONLY | os.O_CLOEXEC)
            self.outgoing = os.open(to_candidate, os.O_WRONLY | os.O_CLOEXEC)
        elif side == "candidate":
            self.outgoing = os.open(to_reference, os.O_WRONLY | os.O_CLOEXEC)
            self.incoming = os.open(to_candidate, os.O_RDONLY | os.O_CLOEXEC)
        else:
            raise ValueError(side)
        self.buffer = bytearray()
        self.closed = False

    def send(self, message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        view = memoryview(data)
        try:
            while view:
                written = os.write(self.outgoing, view)
                view = view[written:]
        except BrokenPipeError as error:
            raise SessionClosed("the other process closed the session") from error

    def receive(self) -> dict:
        while True:
            newline = self.buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self.buffer[:newline])
                del self.buffer[: newline + 1]
                if not line.strip():
                    continue
                try:
                    message = json.loads(line)
                except ValueError as error:
                    raise SessionClosed("the other process sent a message that is not JSON") from error
                if not isinstance(message, dict):
                    raise SessionClosed("the other process sent a message that is not an object")
                return message
            if self.closed:
                raise SessionClosed("the other process closed the session")
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise SessionTimeout("no message arrived before the deadline")
            ready, _, _ = select.select([self.incoming], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self.incoming, 1 << 16)
            if not chunk:
                self.closed = True
                continue
            self.buffer += chunk
            if len(self.buffer) > MESSAGE_LIMIT and self.buffer.find(b"\n") < 0:
                raise SessionClosed("the other process sent a message larger than the limit")

    def close(self) -> None:
        for fd in (self.incoming, self.outgoing):
            try:
                os.close(fd)
            except OSError:
                pass

# SPDX-License-Identifier: Apache-2.0
"""The channel between the reference process and the candidate process of one
verification: two FIFOs the host creates in the session directory (``to_reference`` and
``to_candidate``), carrying JSON lines. The candidate writes its outputs into slot files in
its output directory and announces them; the reference hands out each call (``call``),
reads and compares the outputs, and ends with ``done`` or ``stop``. Whatever arrives from
the candidate is untrusted data."""

from __future__ import annotations

import os
import time

from ..channel import ChannelClosed, ChannelTimeout, JsonLines, MalformedMessage

#: A message from the candidate longer than this is refused.
MESSAGE_LIMIT = 4 << 20

#: The other side closed the channel (its process ended), or broke it with a malformed message.
SessionClosed = ChannelClosed
SessionTimeout = ChannelTimeout


class Session:
    def __init__(self, directory: str, side: str, deadline: float):
        self.deadline = deadline
        to_reference = os.path.join(directory, "to_reference")
        to_candidate = os.path.join(directory, "to_candidate")
        # Both sides open in the same order, so the blocking opens pair up.
        if side == "reference":
            incoming = os.open(to_reference, os.O_RDONLY | os.O_CLOEXEC)
            outgoing = os.open(to_candidate, os.O_WRONLY | os.O_CLOEXEC)
        elif side == "candidate":
            outgoing = os.open(to_reference, os.O_WRONLY | os.O_CLOEXEC)
            incoming = os.open(to_candidate, os.O_RDONLY | os.O_CLOEXEC)
        else:
            raise ValueError(side)
        self.channel = JsonLines(incoming, outgoing, line_limit=MESSAGE_LIMIT)

    def send(self, message: dict) -> None:
        self.channel.send(message)

    def receive(self) -> dict:
        try:
            return self.channel.receive(self.deadline - time.monotonic())
        except ChannelTimeout as error:
            raise SessionTimeout("no message arrived before the deadline") from error
        except MalformedMessage as error:  # nothing after it can be trusted to line up
            raise SessionClosed(str(error)) from error

    def close(self) -> None:
        self.channel.close()

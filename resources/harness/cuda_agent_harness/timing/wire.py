# SPDX-License-Identifier: Apache-2.0
"""How the two sides of a timing session talk: the two FIFOs in the session directory,
JSON lines over them (``Channel``), the protocol version, the marker before the reference
side's result, and the error that ends a session."""

from __future__ import annotations

import errno
import os
import time

from ..channel import JsonLines


#: 2: samples are covered by a lead, so times are the device's alone; the baseline cache's
#: key holds this, so that times taken by version 1 (window from an idle device) are not reused.
PROTOCOL_VERSION = 2
RESULT_MARKER = "CUDA_AGENT_TIMING_RESULT "
TO_REFERENCE = "to_reference"
TO_CANDIDATE = "to_candidate"
MAX_MESSAGE_BYTES = 1 << 20


class SessionError(RuntimeError):
    """The candidate side misbehaved or failed; carries a rejection reason."""

    def __init__(self, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.reason = reason
        self.details = details or {}


# ---------------------------------------------------------------------------------------
# The channel: JSON lines over two FIFOs the launcher creates in the session directory
# (``to_reference`` and ``to_candidate``, as the verifier's sessions have them), with
# deadlines and a size limit. Opening never blocks: a side that never comes is a timeout.


def create_fifos(session_directory: str) -> None:
    """What the launcher does before starting the two sides."""
    for name in (TO_REFERENCE, TO_CANDIDATE):
        path = os.path.join(session_directory, name)
        if not os.path.exists(path):
            os.mkfifo(path, 0o666)
            os.chmod(path, 0o666)


class Channel(JsonLines):
    """The timing session's JSON lines (``channel.JsonLines``) over its two FIFOs."""

    @classmethod
    def open(cls, session_directory: str, side: str, timeout_s: float, gone_marker: str | None = None) -> "Channel":
        """Opens this side's ends: reading its own FIFO at once, writing the other's as soon
        as the other side reads it. Gives up early once ``gone_marker`` exists (the
        launcher creates it when the candidate's process has ended)."""
        mine, theirs = (TO_REFERENCE, TO_CANDIDATE) if side == "reference" else (TO_CANDIDATE, TO_REFERENCE)
        incoming = os.open(os.path.join(session_directory, mine), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                outgoing = os.open(os.path.join(session_directory, theirs), os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                break
            except OSError as error:
                if error.errno != errno.ENXIO:  # ENXIO: nobody reads it yet
                    os.close(incoming)
                    raise
            if gone_marker and os.path.exists(gone_marker):
                os.close(incoming)
                raise EOFError("the candidate's timing process ended before it joined the session")
            if time.monotonic() > deadline:
                os.close(incoming)
                raise TimeoutError(f"the other side did not join the session within {timeout_s:.0f} s")
            time.sleep(0.01)
        os.set_blocking(outgoing, True)
        return cls(incoming, outgoing, line_limit=MAX_MESSAGE_BYTES, writer_may_open_late=True)

# SPDX-License-Identifier: Apache-2.0
"""Starting a worker: its arguments, the warm-up (torch imported once, without initialising
CUDA; the handlers loaded), then serving until shutdown. The host runs ``main``."""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

from .. import PROTOCOL_VERSION, registry
from .dispatch import Worker
from .processes import _PR_SET_CHILD_SUBREAPER, _PR_SET_DUMPABLE, _prctl, _seconds_since_process_start


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
    from ..checks.guard import ForwardGuard

    with torch.no_grad(), ForwardGuard():
        torch.empty(1)
    import torch.autograd.profiler_util  # noqa: F401
    startup["warm_up_s"] = time.monotonic() - mark
    if device == "cuda" and torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised in the worker before forking; children could not use it")
    return torch.__version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cuda_agent_harness.worker.startup")
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

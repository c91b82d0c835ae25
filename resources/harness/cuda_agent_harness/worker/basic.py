# SPDX-License-Identifier: Apache-2.0
"""Handlers that describe the worker and let the host check how it contains a child:
``ping`` reports the environment; ``diagnose`` misbehaves on request (sleeps past its
deadline, crashes, leaves a process or a file behind) or probes what it can read and
write, so that a host can confirm, before trusting a worker, that each misbehaviour is
reported and cleaned up and that the sandbox is what it should be."""

from __future__ import annotations

import os
import signal
import sys
import time

import torch

from ..registry import handler


@handler("ping", prepared=True)
def ping(args: dict, context) -> dict:
    return {"pid": os.getpid(), "uid": os.getuid(), "gid": os.getgid(), "torch": torch.__version__,
            "python": sys.version.split()[0], "role": context.role, "device": context.device,
            "cuda_initialized_before_fork": context.cuda_initialized_at_fork,
            "cuda_initialized": torch.cuda.is_initialized(), "echo": args.get("echo")}


@handler("diagnose_prepared", prepared=True)
def diagnose_prepared(args: dict, context) -> dict:
    """``diagnose`` in the worker's prepared child, with one more action:
    ``report_then_sleep`` sends the result and then sleeps, as a child that is slow to exit
    after its report does."""
    if args.get("action") == "report_then_sleep":
        from ..channel import encode_for_host

        os.write(context._report_fd, encode_for_host({"result": {"action": "report_then_sleep", "done": True}}))
        time.sleep(float(args.get("seconds", 3600)))
    return diagnose(args, context)


@handler("diagnose")
def diagnose(args: dict, context) -> dict:
    action = args.get("action", "")
    if action == "sleep":
        time.sleep(float(args.get("seconds", 3600)))
    elif action == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif action == "exit":
        os._exit(int(args.get("code", 3)))
    elif action == "raise":
        raise RuntimeError(args.get("message", "diagnose raised on request"))
    elif action == "leave_process":
        # Two processes: one that left the child's process group and exits, and its child,
        # which sleeps on. The handler returns once the second runs, so that both exist.
        started_r, started_w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(started_w, b"x")
                time.sleep(3600)
            os._exit(0)
        os.close(started_w)
        os.read(started_r, 1)
        os.close(started_r)
    elif action == "write_file":
        with open(args["path"], "w") as stream:
            stream.write("left behind")
    elif action == "probe":
        target = args["path"]
        exists = os.path.exists(target)
        readable = writable = False
        try:
            if os.path.isdir(target):
                os.listdir(target)
            else:
                with open(target, "rb") as stream:
                    stream.read(1)
            readable = True
        except OSError:
            pass
        try:
            if os.path.isdir(target):
                probe = os.path.join(target, ".probe")
                with open(probe, "xb"):
                    pass
                os.unlink(probe)
                writable = True
            elif exists:
                with open(target, "r+b"):
                    pass
                writable = True
        except OSError:
            pass
        return {"exists": exists, "readable": readable, "writable": writable}
    elif action == "event":
        context.emit({"progress": "halfway"})
    elif action == "output":
        print("x" * int(args.get("bytes", 10)), flush=True)
    elif action == "cuda":
        torch.cuda.init()
        return {"device_name": torch.cuda.get_device_name(0), "device_count": torch.cuda.device_count()}
    return {"action": action, "done": True}

# SPDX-License-Identifier: Apache-2.0
"""The worker's hold on the processes it starts: Linux process controls (subreaper,
parent-death signal), reaping, finding a child's descendants, and ending what a child left
behind."""

from __future__ import annotations

import ctypes
import os
import signal
import time

from ..checks import hygiene


_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


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


def _exists(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie not yet reaped does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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

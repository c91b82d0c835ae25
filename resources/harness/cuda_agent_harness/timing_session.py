# SPDX-License-Identifier: Apache-2.0
"""An interleaved timing session: the candidate against eager PyTorch and torch.compile,
each in a process of its own trust level.

Two processes take part:

* the **reference side** (trusted; never imports the candidate) holds the eager model and
  its ``torch.compile`` form, and runs the session: it decides the seeds, the regime, the
  order of contenders in each round, which timed outputs to re-check, and when to stop;
* the **candidate side** (sandboxed) holds ``ModelNew`` and answers the reference side's
  requests over two FIFOs in the session directory; it writes the outputs it hands over
  into the session's output directory.

They take turns on the GPU, never overlapping: in each round the reference side times its
contenders itself and asks the candidate side for its sample, in an order drawn at random
per round, so that clock drift and order effects fall on all contenders alike (the
speedup is computed per round, then over rounds). Every sample uses fresh inputs from the
round's seed, which the candidate learns only when the round starts; the reference side
probes the SM clock after every sample itself, and rounds in which the clock sagged below
the tolerance are flagged. After some rounds chosen in secret (and after the last), the
candidate side must hand over the outputs it just produced under the timer; the reference
side compares them with its own eager outputs of the same round.

Each sample keeps the device busy with a lead while it is enqueued (``timing``), so the
times are the device's, without the host's dispatch; the share of samples the lead
covered is reported per contender (``dispatch_cover``). A request may hold the session to
a time limit (``budget.session_s``): what start-up, compile and calibration leave of it is
shared over the comparisons, which stop when their share ends (``time_budget`` in the
result says where the time went).

Baselines come from the cache (``baseline_cache``) when a fresh entry exists: then the
reference side times eager only, and the speedup against torch.compile goes through the
cached compile/eager ratio (eager anchors the two sessions). Cache entries are measured
by the reference side alone, before the candidate side is allowed to touch the GPU or
after it has gone. An entry whose eager time or clock no longer matches the live session
is stale: torch.compile is then built and timed live.

Run either side with ``python -m cuda_agent_harness.timing_session reference|candidate
--request FILE``; the reference side prints ``RESULT_MARKER`` followed by its JSON result.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import math
import os
import random
import statistics
import sys
import time
import traceback
from typing import Any, Callable

from . import arena, baseline_cache, timing, trusted_clock
from .channel import JsonLines
from .modules import load_module
from .registry import handler

#: 2: samples are covered by a lead, so times are the device's alone; the baseline cache's
#: key holds this, so that times taken by version 1 (window from an idle device) are not reused.
PROTOCOL_VERSION = 2
RESULT_MARKER = "CUDA_AGENT_TIMING_RESULT "
TO_REFERENCE = "to_reference"
TO_CANDIDATE = "to_candidate"
MAX_MESSAGE_BYTES = 1 << 20

DEFAULT_BUDGET = {
    "time_s": 5.0,  # for the interleaved rounds of one comparison (a target, not a limit)
    # A limit on the whole session (seconds from its start), or None. Start-up, compile,
    # calibration and the baselines' own measurement count against it; each comparison gets
    # a share of what is left and stops when its share ends, once it has floor_rounds.
    "session_s": None,
    "min_rounds": 10,
    "floor_rounds": 5,  # fewer are never enough, whatever the time
    "max_rounds": 400,
    "target_relative_error": 0.01,
    "warmup_s": 0.05,
    "calibration_samples": 5,
}
DEFAULT_CHECK = {"probability": 0.2, "atol": 1e-2, "rtol": 1e-2, "max_elements": 1 << 22}
#: A cached baseline is stale when live eager time drifts from it by more than this. The
#: same kernel timed in two sessions differs by 3 to 8% on real GPUs, and eager anchors the
#: cached compile time to the live session anyway (a uniform drift is carried over), so a
#: tighter bound sent torch.compile back to live timing (seconds) for ordinary noise.
DEFAULT_STALE_TOLERANCE = 0.10
#: ... or when the SM clock differs by more than this: a changed clock changes compute-bound
#: and memory-bound kernels unequally, which the eager anchor cannot carry over.
DEFAULT_STALE_CLOCK_TOLERANCE = 0.05


def stale_reason(live_eager_us: list[float], cached_eager_us: list[float], live_clocks_mhz: list[float],
                 cached_clock_mhz: float | None, tolerance: float = DEFAULT_STALE_TOLERANCE,
                 clock_tolerance: float = DEFAULT_STALE_CLOCK_TOLERANCE) -> str | None:
    """Why a cached measurement no longer describes the live session, or None: eager
    drifted past ``tolerance`` beyond doubt (the interval of the drift, from the intervals
    of both medians, lies wholly outside it; the medians alone decide with too few samples
    for intervals), or the median SM clock moved past ``clock_tolerance``. A noisy session
    whose eager median is off only by its own spread does not make the cache stale."""
    if not live_eager_us or not cached_eager_us:
        return "no eager samples to compare"
    live_median, cached_median = statistics.median(live_eager_us), statistics.median(cached_eager_us)
    drift = live_median / cached_median
    live_interval = timing.median_interval(live_eager_us) or (live_median, live_median)
    cached_interval = timing.median_interval(cached_eager_us) or (cached_median, cached_median)
    lowest, highest = live_interval[0] / cached_interval[1], live_interval[1] / cached_interval[0]
    bound = math.log1p(tolerance)
    if math.log(lowest) > bound or math.log(highest) < -bound:
        return f"eager takes {drift:.3f}x its cached time ({lowest:.3f}x to {highest:.3f}x)"
    if cached_clock_mhz and live_clocks_mhz:
        clock_drift = statistics.median(live_clocks_mhz) / float(cached_clock_mhz)
        if abs(math.log(clock_drift)) > math.log1p(clock_tolerance):
            return f"the SM clock runs at {clock_drift:.3f}x the cached session's"
    return None


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


# ---------------------------------------------------------------------------------------
# Loading the task


def build_reference_model(torch, reference, init_seed: int, device):
    torch.manual_seed(init_seed)
    model = reference.Model(*reference.get_init_inputs())
    return model.to(device.torch_device).eval()


def task_hash_of(reference_path: str) -> str:
    """The task's content hash, computed as the C++ Task::content_hash does."""
    with open(reference_path, "rb") as handle:
        source = handle.read()
    return hashlib.sha256(b"cuda-agent task v1\n" + source).hexdigest()


# ---------------------------------------------------------------------------------------
# The candidate side


class CandidateViolation(Exception):
    """The candidate broke the contract while being timed (a rejection reason and a message)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class CandidateChecks:
    """The verifier's checks, applied around the candidate while it is timed: process-wide
    state it must leave alone (integrity.py), threads and processes it must not leave
    running (hygiene.py), and what may run inside forward (guard.py). The state is taken
    before the candidate is imported, after torch's own pools, modes and graph machinery
    have started. Trusted "candidates" (the reference itself, for A/A measurements) run
    unchecked."""

    def __init__(self, torch, device, enabled: bool, policy: dict):
        self.enabled = enabled
        self.policy = policy
        if not enabled:
            return
        from . import guard, hygiene, integrity

        self.guard_module, self.hygiene = guard, hygiene
        hygiene.warm_thread_pools(device.kind)
        with torch.no_grad(), guard.ForwardGuard():
            torch.empty(1, device=device.torch_device)
        timing.warm_graph_machinery(torch, device)
        self.integrity = integrity.Integrity()
        self.threads = hygiene.os_threads()

    def guarded(self, function: Callable) -> Callable:
        """``function`` under the forward guard; a refused operation ends the session even
        if the candidate caught the exception."""
        if not self.enabled:
            return function
        return GuardedCall(function, self.guard_module.ForwardGuard,
                           tuple(self.policy.get("extra_allowed_operations", ())))

    def violation(self) -> tuple[str, str] | None:
        if not self.enabled:
            return None
        problems = self.integrity.violations()
        if problems:
            return "global_state_modified", (
                "while being timed the candidate changed process-wide state: " + "; ".join(problems[:6])
            )
        started = {tid: name for tid, name in self.hygiene.os_threads().items() if tid not in self.threads}
        if started:
            names = ", ".join(f"'{name}'" for name in list(started.values())[:5])
            return "work_outlived_call", f"the candidate left {len(started)} thread(s) running ({names})"
        children = self.hygiene.child_processes()
        if children:
            return "work_outlived_call", f"the candidate left {len(children)} process(es) running"
        return None


class GuardedCall:
    """A function under the forward guard, one guard per call. While ``serving(allocations)``
    is active, the guard serves allowed creation operators from ``allocations`` (a trusted
    batch's arena) instead of torch's allocator."""

    def __init__(self, function: Callable, guard_class, extra_allowed: tuple):
        self.function = function
        self.guard_class = guard_class
        self.extra_allowed = extra_allowed
        self.allocations = None

    @contextlib.contextmanager
    def serving(self, allocations):
        self.allocations = allocations
        try:
            yield
        finally:
            self.allocations = None

    def __call__(self, *inputs):
        guard = self.guard_class(extra_allowed=self.extra_allowed, allocations=self.allocations)
        try:
            with guard:
                outputs = self.function(*inputs)
        except BaseException:
            violation = self.refused(guard)
            if violation is not None:
                raise violation from None
            raise
        violation = self.refused(guard)
        if violation is not None:
            raise violation
        return outputs

    @staticmethod
    def refused(guard) -> "CandidateViolation | None":
        violation = guard.first_violation()
        if violation is None:
            return None
        shown = violation.get("called_as") or violation["operation"]
        return CandidateViolation("forbidden_operation",
                                  f"ModelNew.forward ran {shown} while being timed: {violation['why']}")


def _candidate_function(request: dict, reference, torch, device, init_seed: int):
    """The callable timed as "candidate": ModelNew normally; for A/A measurements the
    reference model itself ("reference") or its torch.compile form ("compile")."""
    kind = request.get("candidate_kind", "model_new")
    reference_model = build_reference_model(torch, reference, init_seed, device)
    if kind == "reference":
        return reference_model
    if kind == "compile":
        settings = request.get("compile", {})
        return torch.compile(reference_model, mode=_compile_mode(settings), backend=settings.get("backend", "inductor"))
    if kind != "model_new":
        raise ValueError(f"unknown candidate_kind {kind!r}")
    for directory in (request.get("build_directory"), request.get("candidate_directory")):
        if directory and directory not in sys.path:
            sys.path.insert(0, directory)
    candidate = load_module(os.path.join(request["candidate_directory"], "model_new.py"), "model_new")
    torch.manual_seed(init_seed)
    model = candidate.ModelNew(*reference.get_init_inputs())
    model.load_state_dict(reference_model.state_dict())
    del reference_model
    return model.to(device.torch_device).eval()


def _compile_mode(settings: dict):
    mode = settings.get("mode", "default")
    return None if mode in (None, "default") else mode


def run_candidate_side(request: dict) -> dict:
    """Answers the reference side until it says finish. Returns a short status."""
    import torch

    device = timing.make_device(torch, request.get("device", "cuda"), request.get("device_index", 0))
    trusted_code = request.get("candidate_kind", "model_new") != "model_new"
    checks = CandidateChecks(torch, device, enabled=not trusted_code, policy=request.get("policy", {}))
    channel = Channel.open(request["session"], "candidate", request.get("connect_timeout_s", 60.0))
    channel.send({"op": "hello", "pid": os.getpid(), "protocol": PROTOCOL_VERSION})
    contender = None
    shared = None
    runner = None
    try:
        while True:
            message = channel.receive(request.get("idle_timeout_s", 600.0))
            op = message.get("op")
            if op == "finish":
                return {"ok": True}
            try:
                if op == "prepare":
                    constants = device.measure_timing_constants()  # harness code only, before the candidate is imported
                    sys.modules.pop("model", None)
                    reference = load_module(request["reference_path"], "model")
                    function = _candidate_function(request, reference, torch, device, int(message["init_seed"]))
                    make_inputs = timing.InputFactory(reference.get_inputs, device)
                    contender = timing.ContenderTimer("candidate", checks.guarded(function), device, make_inputs)
                    seed = int(message["seed"])
                    contender.warm_up(seed, min_seconds=float(message.get("warmup_s", 0.05)))
                    per_call = contender.calibrate(seed, int(message.get("calibration_samples", 5)))
                    size = contender.bytes_per_call(seed)
                    reply = {"op": "prepared", "per_call_us": per_call, "bytes_per_call": size,
                             "timing_constants": constants}
                elif op == "configure":
                    try:
                        contender.configure(message["regime"], int(message["calls"]), int(message["seed"]))
                        reply = {"op": "configured"}
                    except timing.CaptureFailed as error:
                        reply = {"op": "capture_failed", "message": str(error)}
                elif op == "sample":
                    sample = contender.sample(int(message["seed"]))
                    reply = {"op": "sample", **sample.to_json()}
                elif op == "trusted_arena":
                    # Answered first: the trusted side hands the arena over once it knows we are coming.
                    channel.send({"op": "trusted_arena_waiting"})
                    shared = arena.receive_arena(torch, device.kind, str(message["socket"]),
                                                 getattr(device, "index", 0), float(request.get("connect_timeout_s", 60.0)))
                    continue
                elif op == "trusted_setup":
                    if shared is None:
                        raise RuntimeError("trusted batches were set up before the arena was handed over")
                    layout = trusted_clock.Layout.from_json(message["layout"])
                    sizes = {int(spec["nbytes"]) for spec in message["outputs"]}
                    runner = trusted_clock.TrustedBatchRunner(
                        torch, device, contender.function, shared, layout, contender.make_inputs(0), sizes,
                        serve_allocations=request.get("candidate_kind", "model_new") != "compile")
                    reply = {"op": "trusted_ready", **runner.prepare()}
                elif op == "status":
                    reply = {"op": "status"}
                elif op == "trusted_batch":
                    # Answered at once: the checks below run after the trusted side's clock stops.
                    channel.send({"op": "trusted_done", **runner.run()})
                    problem = checks.violation()
                    if problem:
                        channel.send({"op": "error", "reason": problem[0], "message": problem[1]})
                        return {"ok": False, "error": problem[1]}
                    continue
                else:
                    reply = {"op": "error", "reason": "harness_error", "message": f"unknown request {op!r}"}
            except (CandidateViolation, trusted_clock.TrustedClockError) as violation:
                channel.send({"op": "error", "reason": violation.reason, "message": str(violation)})
                return {"ok": False, "error": str(violation)}
            except Exception as error:
                reason = "load_error" if op == "prepare" else "crashed"
                channel.send(
                    {
                        "op": "error",
                        "reason": reason,
                        "message": f"{type(error).__name__}: {error}",
                        "traceback": traceback.format_exc()[-4000:],
                    }
                )
                return {"ok": False, "error": str(error)}
            problem = checks.violation()
            if problem:
                channel.send({"op": "error", "reason": problem[0], "message": problem[1]})
                return {"ok": False, "error": problem[1]}
            channel.send(reply)
    finally:
        if shared is not None:
            runner = None
            shared.close()
        channel.close()


# ---------------------------------------------------------------------------------------
# The reference side


class RemoteContender:
    """The candidate side, seen from the reference side, with the ContenderTimer surface.
    Its per-call times are recomputed here from the raw window, with this side's launch
    leak, so that every contender gets the same correction."""

    name = "candidate"

    def __init__(self, channel: Channel, timeout_s: float, launch_leak_us: float):
        self.channel = channel
        self.timeout_s = timeout_s
        self.launch_leak_us = launch_leak_us

    def request(self, message: dict, expected: tuple[str, ...], timeout_s: float | None = None) -> dict:
        try:
            self.channel.send(message)
        except EOFError:
            raise SessionError("crashed", f"the candidate's timing process was gone before {message['op']!r}")
        try:
            reply = self.channel.receive(timeout_s or self.timeout_s)
        except TimeoutError as error:
            raise SessionError("timeout", f"the candidate's timing process did not answer {message['op']!r}: {error}")
        except EOFError:
            raise SessionError("crashed", f"the candidate's timing process exited during {message['op']!r}")
        except ValueError as error:
            raise SessionError("harness_error", f"the candidate's timing process sent garbage: {error}")
        if reply.get("op") == "error":
            reason = str(reply.get("reason", "crashed"))
            details = {"traceback": reply.get("traceback", "")} if reply.get("traceback") else {}
            raise SessionError(reason, str(reply.get("message", "the candidate side failed")), details)
        if reply.get("op") not in expected:
            raise SessionError("harness_error", f"unexpected reply {reply.get('op')!r} to {message['op']!r}")
        return reply

    def sample(self, seed: int) -> timing.Sample:
        reply = self.request({"op": "sample", "seed": seed}, ("sample",))
        try:
            values = [float(reply[name]) for name in ("time_us", "raw_us", "escape_us")]
            lead_us, enqueue_us = float(reply.get("lead_us", 0.0)), float(reply.get("enqueue_us", 0.0))
            calls = int(reply["calls"])
        except (KeyError, TypeError, ValueError):
            raise SessionError("harness_error", "the candidate side's sample is malformed")
        covered = reply.get("covered")  # absent from an older candidate side: cannot tell
        possible = (
            all(math.isfinite(value) and value >= 0 for value in values + [lead_us, enqueue_us])
            and values[1] > 0 and calls >= 1 and (covered is None or isinstance(covered, bool))
        )
        if not possible:
            raise SessionError("harness_error", f"the candidate side reported an impossible sample: {reply}")
        raw_us, escape_us = values[1], values[2]
        return timing.Sample(
            time_us=timing.per_call_time(raw_us, escape_us, calls, self.launch_leak_us, covered),
            calls=calls,
            raw_us=raw_us,
            escape_us=escape_us,
            covered=covered,
            lead_us=lead_us,
            enqueue_us=enqueue_us,
            gap_us=_finite_or_zero(reply.get("gap_us")),
            wall_us=_finite_or_zero(reply.get("wall_us")),
        )


def _finite_or_zero(value: Any) -> float:
    """A diagnostic number from the candidate side, or 0 when it sent none or garbage."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def dispatch_cover(rounds: list[dict]) -> dict:
    """Per contender, how many of its samples were covered by their lead (the device's time
    alone in the window), how long the leads were, and the host's time per sample (lead,
    inputs, window and waits, as the contender's own process saw it). ``covered_share`` is
    None where the timer cannot tell (host timers)."""
    summary = {}
    names = sorted({name for each in rounds for name in each["samples"]})
    for name in names:
        samples = [each["samples"][name] for each in rounds if name in each["samples"]]
        known = [sample.get("covered") for sample in samples if sample.get("covered") is not None]
        covered = sum(1 for flag in known if flag)
        leads = [float(sample.get("lead_us") or 0.0) for sample in samples]
        walls = [float(sample["wall_us"]) for sample in samples if sample.get("wall_us")]
        summary[name] = {
            "samples": len(samples),
            "covered": covered,
            "covered_share": covered / len(samples) if known else None,
            "lead_us_median": statistics.median(leads) if leads else None,
            "lead_us_max": max(leads, default=None),
            "wall_us_median": statistics.median(walls) if walls else None,
        }
    return summary


def comparison_share_s(seconds_left: float, comparisons_left: int, most_s: float) -> float:
    """Seconds for the next comparison of a session held to a time limit: what is left of
    the limit (the overhead so far is already spent) shared over the comparisons still
    owed, at most ``most_s``, never negative."""
    return max(0.0, min(most_s, seconds_left / max(1, comparisons_left)))


class ReferenceSession:
    def __init__(self, request: dict):
        import torch

        self.torch = torch
        self.request = request
        self.started = time.monotonic()
        self.rng = random.Random(int(request.get("seed", random.SystemRandom().getrandbits(63))))
        self.budget = {**DEFAULT_BUDGET, **request.get("budget", {})}
        self.check = {**DEFAULT_CHECK, **request.get("check", {})}
        self.compile_settings = {"enabled": True, "mode": "default", "backend": "inductor", **request.get("compile", {})}
        self.short_kernel_us = float(request.get("short_kernel_us", timing.DEFAULT_SHORT_KERNEL_US))
        self.throttle_tolerance = float(request.get("throttle_tolerance", 0.25))
        self.stale_tolerance = float(request.get("stale_tolerance", DEFAULT_STALE_TOLERANCE))
        self.stale_clock_tolerance = float(request.get("stale_clock_tolerance", DEFAULT_STALE_CLOCK_TOLERANCE))
        self.device = timing.make_device(torch, request.get("device", "cuda"), request.get("device_index", 0))
        self.warnings: list[str] = list(getattr(self.device, "warnings", []))
        self.init_seed = self.rng.getrandbits(31)
        self.reference = load_module(request["reference_path"], "cuda_agent_reference")
        self.model = build_reference_model(torch, self.reference, self.init_seed, self.device)
        self.make_inputs = timing.InputFactory(self.reference.get_inputs, self.device)
        self.eager = timing.ContenderTimer("eager", self.model, self.device, self.make_inputs)
        self.compiled: timing.ContenderTimer | None = None
        self.compile_seconds = None
        self.clocks: list[float] = []
        self.time_limit_s = None if self.budget.get("session_s") is None else float(self.budget["session_s"])
        self.rounds_seconds = 0.0
        self.comparisons = 0
        #: Where the rounds' time went, beside the samples themselves (``time_budget``).
        self.round_costs = {"sampling_s": {}, "clock_probes_s": 0.0, "trusted_batches_s": 0.0}
        #: The trusted clock's batches of the candidate (``trusted_clock``), once prepared.
        self.trusted: trusted_clock.TrustedClock | None = None
        self.trusted_settings = dict(request.get("trusted_clock") or {})
        #: Where the time outside the rounds went, by step (``time_budget``).
        self.setup_s: dict[str, float] = {}
        self.result: dict = {"ok": False, "protocol": PROTOCOL_VERSION}

    # -- helpers ------------------------------------------------------------------------
    @contextlib.contextmanager
    def timed(self, step: str, table: dict | None = None):
        """Adds the block's seconds to ``table[step]`` (``setup_s`` unless another is given)."""
        table = self.setup_s if table is None else table
        started = time.monotonic()
        try:
            yield
        finally:
            table[step] = table.get(step, 0.0) + time.monotonic() - started

    def seed(self) -> int:
        return self.rng.getrandbits(63)

    def clock(self) -> float | None:
        value = self.device.clock_mhz()
        if value is not None:
            self.clocks.append(value)
        return value

    def reference_clock(self) -> float | None:
        return max(self.clocks) if self.clocks else None

    def build_compile(self) -> timing.ContenderTimer:
        if self.compiled is None:
            caches = self.request.get("compile_cache_directory")
            if caches:  # inductor and Triton read these when they first compile
                os.makedirs(caches, exist_ok=True)
                os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(caches, "inductor"))
                os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(caches, "triton"))
            settings = self.compile_settings
            started = time.monotonic()
            function = self.torch.compile(self.model, mode=_compile_mode(settings), backend=settings["backend"])
            self.compiled = timing.ContenderTimer("compile", function, self.device, self.make_inputs)
            self.compiled.warm_up(self.seed(), min_seconds=self.budget["warmup_s"])
            self.compile_seconds = time.monotonic() - started
        return self.compiled

    def calibrate_local(self, contender: timing.ContenderTimer) -> float:
        value = contender.calibrate(self.seed(), int(self.budget["calibration_samples"]))
        self.clock()
        return value

    def cache_key(self) -> dict:
        torch = self.torch
        sample_inputs = self.make_inputs(0)
        torch.manual_seed(0)
        init_inputs = list(self.reference.get_init_inputs())
        return baseline_cache.make_key(
            task_hash=self.request.get("task_hash") or task_hash_of(self.request["reference_path"]),
            gpu=self.device.describe()["name"],
            driver=baseline_cache.driver_version() if self.device.kind == "cuda" else "none",
            torch=baseline_cache.software_versions(torch),
            compile_mode=str(self.compile_settings["mode"]),
            compile_backend=str(self.compile_settings["backend"]),
            input_signature={
                "inputs": baseline_cache.input_signature(sample_inputs, torch),
                "init_inputs": baseline_cache.input_signature(init_inputs, torch),
            },
            protocol=f"timing v{PROTOCOL_VERSION} {self.device.kind}",
        )

    # -- phases -----------------------------------------------------------------------
    def configure_all(self, contenders: dict, regime: str, calls: int) -> str:
        """Configures every contender; a graph any of them refuses sends all to batching."""
        seed = self.seed()
        failures = []
        for name, contender in contenders.items():
            if isinstance(contender, RemoteContender):
                reply = contender.request(
                    {"op": "configure", "regime": regime, "calls": calls, "seed": seed}, ("configured", "capture_failed")
                )
                if reply["op"] == "capture_failed":
                    failures.append(str(reply.get("message", name)))
            else:
                try:
                    contender.configure(regime, calls, seed)
                except timing.CaptureFailed as error:
                    failures.append(str(error))
        if failures and regime == timing.CUDA_GRAPH:
            self.warnings.append("CUDA graph capture failed (" + "; ".join(failures) + "); every contender runs batched")
            return self.configure_all(contenders, timing.BATCHED, calls)
        if failures:
            raise SessionError("harness_error", "; ".join(failures))
        return regime

    def comparison_time(self, comparisons_left: int) -> tuple[float, float | None]:
        """(seconds the next comparison aims at, the monotonic time it must stop at or None).
        Under a session limit, its share of what is left; otherwise the budget's time."""
        most = float(self.budget["time_s"])
        if self.time_limit_s is None:
            return most, None
        left = self.started + self.time_limit_s - time.monotonic()
        share = comparison_share_s(left, comparisons_left, most)
        return share, time.monotonic() + share

    def run_rounds(self, contenders: dict, pairs: list[tuple[str, str]], challenge: bool,
                   comparisons_left: int = 1) -> tuple[list, str]:
        """Interleaved rounds until the speedups of ``pairs`` are precise enough, the time
        budget is spent, the comparison's share of a session limit ends, or the round limit
        is reached. ``comparisons_left`` counts this one and those still to come. With
        ``challenge``, rounds drawn in secret (and the last ones, up to the trusted clock's
        least number of batches) end with a trusted batch of the candidate."""
        rounds: list[dict] = []
        started = time.monotonic()
        budget_s, stop_at = self.comparison_time(comparisons_left)
        target = math.log1p(float(self.budget["target_relative_error"]))
        min_rounds, floor_rounds = int(self.budget["min_rounds"]), int(self.budget["floor_rounds"])
        max_rounds = int(self.budget["max_rounds"])
        names = list(contenders)
        stop_reason = "max_rounds"
        for index in range(max_rounds):
            seed = self.seed()
            order = names[:]
            self.rng.shuffle(order)
            samples = {}
            for name in order:
                with self.timed(name, self.round_costs["sampling_s"]):
                    entry = contenders[name].sample(seed).to_json()
                with self.timed("clock_probes_s", self.round_costs):
                    entry["clock_mhz"] = self.clock()
                samples[name] = entry
            reference_clock = self.reference_clock()
            flagged = any(
                timing.throttled(entry["clock_mhz"], reference_clock, self.throttle_tolerance) for entry in samples.values()
            )
            record = {"round": index, "order": order, "samples": samples, "throttled": flagged, "checked": False}
            rounds.append(record)
            if challenge and self.rng.random() < float(self.check["probability"]):
                self.trusted_batch(contenders, record)
            usable = [each for each in rounds if not each["throttled"]]
            now = time.monotonic()
            if len(usable) >= min_rounds and self.precise(usable, pairs, target):
                stop_reason = "target_reached"
                break
            if now - started >= budget_s and len(usable) >= floor_rounds:
                stop_reason = "time_budget"
                break
            # Throttled rounds count here: a limit must end the comparison even on a hot GPU.
            if stop_at is not None and now >= stop_at and len(rounds) >= floor_rounds:
                stop_reason = "time_limit"
                break
            if now > self.deadline():
                stop_reason = "deadline"
                break
        if challenge and self.trusted is not None:
            owed = int(self.trusted.settings["min_batches"]) - sum(1 for each in rounds if each["checked"])
            for record in ([each for each in rounds if not each["checked"]][-owed:] if owed > 0 else []):
                self.trusted_batch(contenders, record)
        self.rounds_seconds += time.monotonic() - started
        self.comparisons += 1
        return rounds, stop_reason

    def deadline(self) -> float:
        return self.started + float(self.request.get("deadline_s", 900.0)) - 5.0

    @staticmethod
    def precise(rounds: list[dict], pairs: list[tuple[str, str]], target: float) -> bool:
        for baseline, candidate in pairs:
            precision = timing.ratio_precision(
                [each["samples"][baseline]["time_us"] for each in rounds],
                [each["samples"][candidate]["time_us"] for each in rounds],
            )
            if precision is None or precision > target:
                return False
        return True

    def trusted_batch(self, contenders: dict, record: dict) -> None:
        """A trusted batch of the candidate after this round (``trusted_clock``): its time
        as this side's own clock bounds it, and its outputs read back and checked here."""
        if self.trusted is None:
            return
        with self.timed("trusted_batches_s", self.round_costs):
            try:
                entry = self.trusted.batch(contenders["candidate"].request, self.eager.regime)
            except trusted_clock.TrustedClockError as error:
                raise SessionError(error.reason, f"round {record['round']}: {error}",
                                   {"round": record["round"], **error.details}) from None
        record["checked"] = True
        record["trusted_batch"] = entry

    def measure_baselines_alone(self, regime: str, calls: int, calibration: dict, comparisons_left: int = 1) -> dict:
        """Eager and compile interleaved with no candidate process on the GPU: what the cache keeps."""
        contenders = {"eager": self.eager, "compile": self.build_compile()}
        used = self.configure_all(contenders, regime, calls)
        rounds, stop = self.run_rounds(contenders, [("eager", "compile")], challenge=False,
                                       comparisons_left=comparisons_left)
        usable = [each for each in rounds if not each["throttled"]] or rounds
        clocks = [each["samples"]["eager"]["clock_mhz"] for each in usable if each["samples"]["eager"]["clock_mhz"]]
        return {
            "regime": used,
            "calls": calls,
            "calibration_us": calibration,
            "rounds": [
                {"eager": each["samples"]["eager"]["time_us"], "compile": each["samples"]["compile"]["time_us"]}
                for each in usable
            ],
            "clock_mhz": statistics.median(clocks) if clocks else None,
            "stop_reason": stop,
        }

    def stale(self, measurement: dict, rounds: list[dict]) -> str | None:
        """Why a cached measurement no longer describes this session, or None."""
        return stale_reason(
            [each["samples"]["eager"]["time_us"] for each in rounds if not each["throttled"]],
            [each["eager"] for each in measurement["rounds"]],
            [each["samples"]["eager"]["clock_mhz"] for each in rounds if each["samples"]["eager"].get("clock_mhz")],
            measurement.get("clock_mhz"), self.stale_tolerance, self.stale_clock_tolerance)

    # -- the whole session ----------------------------------------------------------------
    def run(self) -> dict:
        result = self.result
        result["device"] = self.device.describe()
        with self.timed("timing_constants"):
            result["timing_constants"] = self.device.measure_timing_constants()
        with self.timed("eager_warm_up_and_calibration"):
            self.eager.warm_up(self.seed(), min_seconds=self.budget["warmup_s"])
            for _ in range(3):
                self.clock()
            calibration = {"eager": self.calibrate_local(self.eager)}
        compile_enabled = bool(self.compile_settings["enabled"])
        cache = None
        key = None
        cache_status = {"status": "disabled"}
        cache_directory = (self.request.get("baseline_cache") or {}).get("directory")
        if compile_enabled and cache_directory:
            cache = baseline_cache.BaselineCache(cache_directory)
            key = self.cache_key()
            cache_status = {"file": cache.path_for(key), "key": key}
        cached_entry = None
        if cache is not None:
            cached_entry, status = cache.load(key)
            cache_status["status"] = status if status in ("hit", "miss") else "corrupt"
            if status.startswith("corrupt"):
                self.warnings.append(f"baseline cache file unusable ({status}); measuring afresh")

        # Baselines' own regime; on a miss, measure them alone before the candidate starts.
        if compile_enabled:
            cached_compile_us = None
            if cached_entry:
                calibrations = [m["calibration_us"].get("compile") for m in cached_entry["regimes"].values()]
                cached_compile_us = next((value for value in calibrations if value), None)
            if cached_compile_us is None:
                calibration["compile"] = self.calibrate_local(self.build_compile())
            else:
                calibration["compile"] = float(cached_compile_us)
            natural, _ = timing.choose_regime(calibration, self.device.supports_graphs, self.short_kernel_us)
            if cache is not None and not (cached_entry and natural in cached_entry["regimes"]):
                calls = self.calls_for(calibration, natural)
                measurement = self.measure_baselines_alone(natural, calls, dict(calibration),
                                                           comparisons_left=1 + self.repetitions())
                cache.store(key, measurement["regime"], measurement)
                cached_entry, _ = cache.load(key)
                cache_status["stored"] = [measurement["regime"]]

        # The candidate side may now use the GPU.
        try:
            channel = Channel.open(self.request["session"], "reference",
                                   float(self.request.get("connect_timeout_s", 120.0)),
                                   self.request.get("candidate_gone_marker"))
        except (TimeoutError, EOFError) as error:
            result["rejection"] = {"reason": "crashed", "message": str(error), "details": {}}
            return self.finish(calibration, cache_status)
        try:
            outcome = self.run_with_candidate(channel, calibration, cached_entry, cache_status)
        except SessionError as error:
            result["rejection"] = {"reason": error.reason, "message": str(error), "details": error.details}
            with contextlib.suppress(OSError, EOFError):
                channel.send({"op": "finish"})
            channel.close()
            return self.finish(calibration, cache_status)
        # The candidate's process must let go of the GPU before the baselines run alone again.
        try:
            channel.receive(float(self.request.get("exit_timeout_s", 10.0)))
            self.warnings.append("the candidate side kept talking after finish")
        except EOFError:
            pass
        except (TimeoutError, ValueError, OSError) as error:
            self.warnings.append(f"the candidate side did not exit cleanly: {error}")
        channel.close()
        regime, calls, live_compile = outcome["regime"], outcome["calls"], outcome["live_compile"]
        if cache is not None and live_compile and (
            cache_status.get("stale") or regime not in (cached_entry or {}).get("regimes", {})
        ):
            refreshed = self.measure_baselines_alone(regime, calls, dict(calibration))
            cache.store(key, refreshed["regime"], refreshed)
            cache_status.setdefault("stored", []).append(refreshed["regime"])
        result["ok"] = True
        return self.finish(calibration, cache_status)

    def run_with_candidate(self, channel: Channel, calibration: dict, cached_entry: dict | None,
                           cache_status: dict) -> dict:
        """Prepares the candidate side, agrees on a regime, and runs the interleaved rounds."""
        result = self.result
        remote = RemoteContender(
            channel, float(self.request.get("reply_timeout_s", 120.0)), self.device.launch_leak_us
        )
        try:
            with self.timed("candidate_hello"):
                hello = channel.receive(30.0)
        except (TimeoutError, EOFError, ValueError) as error:
            raise SessionError("crashed", f"the candidate's timing process did not start: {error}")
        if hello.get("op") != "hello":
            raise SessionError("harness_error", "the candidate side did not introduce itself")
        with self.timed("candidate_prepare"):
            prepared = remote.request(
                {"op": "prepare", "init_seed": self.init_seed, "seed": self.seed(),
                 "warmup_s": self.budget["warmup_s"], "calibration_samples": self.budget["calibration_samples"]},
                ("prepared",), timeout_s=float(self.request.get("prepare_timeout_s", 600.0)),
            )
        result["candidate_timing_constants"] = prepared.get("timing_constants")
        try:
            calibration["candidate"] = float(prepared["per_call_us"])
        except (KeyError, TypeError, ValueError):
            raise SessionError("harness_error", "the candidate side's calibration is malformed")
        compile_enabled = bool(self.compile_settings["enabled"])
        regime, reason = timing.choose_regime(calibration, self.device.supports_graphs, self.short_kernel_us)
        with self.timed("configure"):
            calls = self.calls_for(calibration, regime, int(prepared.get("bytes_per_call", 0) or 0))
            # torch.compile is timed live whenever it was built in this session (cache
            # miss), or when no cached measurement exists for the regime the comparison needs.
            contenders: dict = {"candidate": remote, "eager": self.eager}
            if compile_enabled and self.compiled is not None:
                contenders["compile"] = self.compiled
            regime = self.configure_all(contenders, regime, calls)
        cached_regimes = cached_entry["regimes"] if cached_entry else {}
        if compile_enabled and "compile" not in contenders and regime not in cached_regimes:
            contenders["compile"] = self.build_compile()
            regime = self.configure_all(contenders, regime, calls)
        measurement = None if "compile" in contenders else cached_regimes.get(regime)
        result.update({"regime": regime, "regime_reason": reason, "calls_per_sample": calls})
        if self.trusted_settings.get("enabled", True):
            with self.timed("trusted_clock_setup"):
                self.prepare_trusted_clock(remote, calibration)

        pairs = [("eager", "candidate")] + ([("compile", "candidate")] if "compile" in contenders else [])
        repetitions = self.repetitions()
        rounds, stop = self.run_rounds(contenders, pairs, challenge=True, comparisons_left=repetitions)
        if measurement is not None:
            why = self.stale(measurement, rounds)
            if why:
                self.warnings.append(f"cached baselines are stale ({why}); torch.compile is timed live")
                cache_status["stale"] = why
                contenders["compile"] = self.build_compile()
                regime = self.configure_all(contenders, regime, calls)
                pairs.append(("compile", "candidate"))
                more, stop = self.run_rounds(contenders, pairs, challenge=True, comparisons_left=repetitions)
                for each in more:
                    each["round"] += len(rounds)
                rounds += more
                measurement = None
        # Further independent comparisons in the same processes (A/A measurements).
        compared = [{"rounds": rounds, "stop_reason": stop}]
        for done in range(1, repetitions):
            more, more_stop = self.run_rounds(contenders, pairs, challenge=True, comparisons_left=repetitions - done)
            compared.append({"rounds": more, "stop_reason": more_stop})
        # The candidate side's own checks after its last trusted batch, before the verdict.
        remote.request({"op": "status"}, ("status",))
        self.judge_trusted_clock(compared)
        with contextlib.suppress(EOFError):
            channel.send({"op": "finish"})
        if len(compared) > 1:
            result["repetitions"] = compared
        result.update(
            {
                "dispatch_cover": dispatch_cover([each for repetition in compared for each in repetition["rounds"]]),
                "regime": regime,
                "rounds": rounds,
                "stop_reason": stop,
                "compile_source": "none" if not compile_enabled else ("live" if "compile" in contenders else "cache"),
                "cached_baselines": (
                    {"regime": regime, "rounds": measurement["rounds"], "clock_mhz": measurement.get("clock_mhz"),
                     "measured_at": measurement.get("measured_at")}
                    if measurement is not None else None
                ),
            }
        )
        return {"regime": regime, "calls": calls, "live_compile": "compile" in contenders}

    def prepare_trusted_clock(self, remote: "RemoteContender", calibration: dict) -> None:
        """Hands the arena over to the candidate side and prepares its trusted batches,
        sized from the faster of eager's calibration and the candidate's own."""
        settings = {key: value for key, value in self.trusted_settings.items() if key not in ("enabled", "enforce")}
        clock = trusted_clock.TrustedClock(self.torch, self.device, self.eager, self.make_inputs, self.rng, settings,
                                           atol=float(self.check["atol"]), rtol=float(self.check["rtol"]))
        socket_path = self.request.get("trusted_socket") or os.path.join(self.request["session"], "trusted.sock")
        try:
            clock.setup(remote.request, socket_path, min(calibration["eager"], calibration["candidate"]),
                        float(self.request.get("connect_timeout_s", 60.0)))
        except trusted_clock.TrustedClockError as error:
            clock.close()
            raise SessionError(error.reason, str(error), error.details) from None
        except arena.ArenaError as error:
            clock.close()
            raise SessionError("harness_error", f"the trusted clock could not be set up: {error}") from None
        self.trusted = clock

    def judge_trusted_clock(self, compared: list[dict]) -> None:
        """The trusted clock's verdict on the candidate's reported times, over every
        comparison's unthrottled rounds: a rejection when they are below its bound by more
        than its margin (unless the request only observes, as for trusted "candidates")."""
        if self.trusted is None:
            return
        # The windows as the candidate side measured them, before the launch-leak charge: that
        # charge is the profiler's correction for host latency inside an uncovered window, which
        # a batch of calls back to back does not hold, so it is no part of what the bound checks.
        samples = [each["samples"]["candidate"] for repetition in compared
                   for each in repetition["rounds"] if not each["throttled"]]
        reported = [(sample["raw_us"] + sample["escape_us"]) / max(int(sample["calls"]), 1) for sample in samples]
        summary = self.trusted.judge(reported)
        summary["enforced"] = bool(self.trusted_settings.get("enforce", True))
        self.result["trusted_clock"] = summary
        if summary["rejected"] and summary["enforced"]:
            raise SessionError(
                "time_below_trusted_bound",
                f"the candidate's process reported {summary['reported_median_us']:.2f} µs per call, but the trusted"
                f" side's own clock saw at least {summary['bound_us_fastest']:.2f} µs per call in"
                f" {summary['batches']} batches of {summary['calls_per_batch']} calls on inputs it placed itself"
                f" (the reported time may be at most {summary['margin']:.0%} below that bound). Times are measured,"
                " never reported: do not change how the candidate's process times its calls.",
                {"trusted_clock": summary})

    def repetitions(self) -> int:
        """Independent comparisons with the candidate (more than one for A/A measurements)."""
        return max(1, int(self.request.get("repetitions", 1)))

    def calls_for(self, calibration: dict, regime: str, candidate_bytes: int = 0) -> int:
        if regime == timing.PER_CALL:
            return 1
        size = max(self.eager.bytes_per_call(self.seed()), candidate_bytes)
        return timing.choose_calls_per_sample(min(calibration.values()), size)

    def finish(self, calibration: dict, cache_status: dict) -> dict:
        result = self.result
        if self.trusted is not None:
            self.trusted.close()
        elapsed = time.monotonic() - self.started
        result.update(
            {
                "time_budget": {
                    "limit_s": self.time_limit_s,
                    "comparisons": self.comparisons,
                    "rounds_s": self.rounds_seconds,
                    "overhead_s": elapsed - self.rounds_seconds,
                    # Parts of rounds_s: each contender's samples as this side waited for
                    # them (the candidate's include the exchange with its process), the
                    # clock probes after them, and the re-checks of timed outputs.
                    **self.round_costs,
                    # Parts of overhead_s, by step (the rest: start-up, the cache, compile).
                    "setup_s": self.setup_s,
                },
                "calibration_us": calibration,
                "reference_clock_mhz": self.reference_clock(),
                "implausible_clock_readings": getattr(self.device, "implausible_clock_readings", 0),
                "throttle_tolerance": self.throttle_tolerance,
                "baseline_cache": cache_status,
                "compile_seconds": self.compile_seconds,
                "elapsed_s": elapsed,
                "warnings": self.warnings,
            }
        )
        return result


def run_reference_side(request: dict) -> dict:
    try:
        return ReferenceSession(request).run()
    except SessionError as error:
        return {"ok": False, "protocol": PROTOCOL_VERSION,
                "rejection": {"reason": error.reason, "message": str(error), "details": error.details}}
    except Exception as error:  # the harness's own failure, reported, never a crash
        return {
            "ok": False,
            "protocol": PROTOCOL_VERSION,
            "error": f"{type(error).__name__}: {error}",
            "traceback": traceback.format_exc()[-4000:],
        }


def run_locally(request: dict, candidate_request: dict, fork: bool | None = None, fork_reference: bool = False) -> dict:
    """Runs both sides on this machine. The candidate side runs in a child process: forked
    when torch is already imported and CUDA not yet initialized here (as the harness's warm
    workers do), else a fresh interpreter. The reference side runs in this process, or with
    ``fork_reference`` in a forked child too, so that this process never initializes CUDA
    and can run session after session. The candidate side is NOT sandboxed: for trusted
    code, tests and benchmarks, or when this whole process already runs inside a sandbox."""
    import shutil
    import subprocess
    import tempfile

    owned = None
    if not request.get("session"):
        owned = tempfile.mkdtemp(prefix="cuda-agent-timing-")
        request = {**request, "session": owned}
    candidate_request = {**candidate_request, "session": request["session"]}
    create_fifos(request["session"])
    torch_module = sys.modules.get("torch")
    cuda_ready = torch_module is not None and torch_module.cuda.is_initialized()
    if fork is None:
        fork = torch_module is not None and not cuda_ready
    children: list[tuple[int, str]] = []
    child = None
    if fork:
        children.append((_fork(lambda: run_candidate_side(candidate_request).get("ok")), "candidate"))
    else:
        harness_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [harness_root, environment.get("PYTHONPATH")]))
        child = subprocess.Popen(
            [sys.executable, "-m", "cuda_agent_harness.timing_session", "candidate", "--request", "-"],
            stdin=subprocess.PIPE, env=environment,
        )
        child.stdin.write(json.dumps(candidate_request).encode())
        child.stdin.close()
    try:
        if fork_reference:
            descriptor, result_path = tempfile.mkstemp(prefix="cuda-agent-timing-result-", suffix=".json")
            os.close(descriptor)

            def reference_side():
                outcome = run_reference_side(request)
                with open(result_path, "w", encoding="utf-8") as handle:
                    json.dump(outcome, handle)
                return True

            pid = _fork(reference_side)
            _wait(pid, float(request.get("deadline_s", 900.0)) + 30.0)
            try:
                with open(result_path, encoding="utf-8") as handle:
                    result = json.load(handle)
            except ValueError:
                result = {"ok": False, "protocol": PROTOCOL_VERSION, "error": "the reference side died without a result"}
            finally:
                os.unlink(result_path)
        else:
            result = run_reference_side(request)
    finally:
        grace = float(request.get("exit_timeout_s", 10.0))
        for pid, _ in children:
            _wait(pid, grace)
        if child is not None:
            try:
                child.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if owned:
            shutil.rmtree(owned, ignore_errors=True)
    return result


def _fork(body: Callable[[], Any]) -> int:
    """Runs ``body`` in a forked child that exits with 0 when it returns something true."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if body() else 1
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def _wait(pid: int, timeout_s: float) -> None:
    """Waits for a forked child, killing it after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished:
            return
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return
        time.sleep(0.02)


@handler("timing_reference", prepared=True, alone=True)
def timing_reference(args: dict, context) -> dict:
    """The reference side of a timing session, in a child of the (trusted) reference
    worker. Args: as ``run_reference_side``; the request's deadline bounds the session."""
    request = dict(args)
    request["deadline_s"] = min(float(request.get("deadline_s", 900.0)), context.seconds_left())
    return run_reference_side(request)


@handler("timing_candidate", prepared=True, alone=True)
def timing_candidate(args: dict, context) -> dict:
    """The candidate side of a timing session, in a child of the (sandboxed) candidate worker."""
    request = dict(args)
    request.setdefault("device", context.device)
    return run_candidate_side(request)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("side", choices=("reference", "candidate"))
    parser.add_argument("--request", required=True, help="JSON request file ('-' for standard input)")
    arguments = parser.parse_args(argv)
    if arguments.request == "-":
        request = json.load(sys.stdin)
    else:
        with open(arguments.request, encoding="utf-8") as handle:
            request = json.load(handle)
    if arguments.side == "reference":
        result = run_reference_side(request)
        if request.get("result_path"):
            temporary = request["result_path"] + ".partial"
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(result, handle)
            os.replace(temporary, request["result_path"])
        sys.stdout.write(RESULT_MARKER + json.dumps(result) + "\n")
        sys.stdout.flush()
        return 0 if result.get("ok") or result.get("rejection") else 1
    status = run_candidate_side(request)
    return 0 if status.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())

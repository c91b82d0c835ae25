# SPDX-License-Identifier: Apache-2.0
"""The reference side of a timing session (trusted; never imports the candidate): it holds
the eager model and its ``torch.compile`` form, decides the seeds, the regime, the order
of contenders in each round, which timed outputs to re-check and when to stop, and writes
the result."""

from __future__ import annotations

import base64
import contextlib
import math
import os
import random
import statistics
import time
import traceback

from . import arena, baseline_cache, trusted_clock
from ..modules import load_module
from .contender_timer import ContenderTimer, Sample
from .devices import make_device
from .estimates import ratio_precision, throttled
from .input_sets import InputFactory, derive_seed
from .report import _finite_or_zero, dispatch_cover
from .request import (
    DEFAULT_BUDGET, DEFAULT_CHECK, _compile_mode, build_reference_model, comparison_share_s, task_hash_of,
)
from .sampling import (
    BATCHED, CUDA_GRAPH, DEFAULT_SHORT_KERNEL_US, PER_CALL, CaptureFailed, choose_calls_per_sample, choose_regime,
    per_call_time,
)
from .staleness import DEFAULT_STALE_CLOCK_TOLERANCE, DEFAULT_STALE_TOLERANCE, stale_reason
from .wire import Channel, PROTOCOL_VERSION, SessionError


#: Elements of each output of a timed sample that are read back and checked.
SAMPLE_CHECK_ELEMENTS = 256


def _decoded(torch, gathered, count: int):
    """The values the candidate side handed over ({"dtype", "data"}), or None if malformed."""
    try:
        dtype = getattr(torch, str(gathered["dtype"]).replace("torch.", ""))
        raw = base64.b64decode(str(gathered["data"]), validate=True)
        values = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype) if raw else torch.empty(0, dtype=dtype)
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError):
        return None
    return values.clone() if values.numel() == count else None


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

    def sample(self, seed: int) -> Sample:
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
        return Sample(
            time_us=per_call_time(raw_us, escape_us, calls, self.launch_leak_us, covered),
            calls=calls,
            raw_us=raw_us,
            escape_us=escape_us,
            covered=covered,
            lead_us=lead_us,
            enqueue_us=enqueue_us,
            gap_us=_finite_or_zero(reply.get("gap_us")),
            wall_us=_finite_or_zero(reply.get("wall_us")),
        )


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
        self.short_kernel_us = float(request.get("short_kernel_us", DEFAULT_SHORT_KERNEL_US))
        self.throttle_tolerance = float(request.get("throttle_tolerance", 0.25))
        self.stale_tolerance = float(request.get("stale_tolerance", DEFAULT_STALE_TOLERANCE))
        self.stale_clock_tolerance = float(request.get("stale_clock_tolerance", DEFAULT_STALE_CLOCK_TOLERANCE))
        self.device = make_device(torch, request.get("device", "cuda"), request.get("device_index", 0))
        self.warnings: list[str] = list(getattr(self.device, "warnings", []))
        self.init_seed = self.rng.getrandbits(31)
        self.reference = load_module(request["reference_path"], "cuda_agent_reference")
        self.model = build_reference_model(torch, self.reference, self.init_seed, self.device,
                                           request.get("weight_gains"))
        self.make_inputs = InputFactory(self.reference.get_inputs, self.device)
        self.eager = ContenderTimer("eager", self.model, self.device, self.make_inputs)
        self.compiled: ContenderTimer | None = None
        self.compile_seconds = None
        self.clocks: list[float] = []
        self.time_limit_s = None if self.budget.get("session_s") is None else float(self.budget["session_s"])
        self.rounds_seconds = 0.0
        self.comparisons = 0
        #: Where the rounds' time went, beside the samples themselves (``time_budget``).
        self.round_costs = {"sampling_s": {}, "clock_probes_s": 0.0, "trusted_batches_s": 0.0, "sample_checks_s": 0.0}
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

    def build_compile(self) -> ContenderTimer:
        if self.compiled is None:
            caches = self.request.get("compile_cache_directory")
            if caches:  # inductor and Triton read these when they first compile
                os.makedirs(caches, exist_ok=True)
                os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(caches, "inductor"))
                os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(caches, "triton"))
            settings = self.compile_settings
            started = time.monotonic()
            function = self.torch.compile(self.model, mode=_compile_mode(settings), backend=settings["backend"])
            self.compiled = ContenderTimer("compile", function, self.device, self.make_inputs)
            self.compiled.warm_up(self.seed(), min_seconds=self.budget["warmup_s"])
            self.compile_seconds = time.monotonic() - started
        return self.compiled

    def calibrate_local(self, contender: ContenderTimer) -> float:
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
                except CaptureFailed as error:
                    failures.append(str(error))
        if failures and regime == CUDA_GRAPH:
            self.warnings.append("CUDA graph capture failed (" + "; ".join(failures) + "); every contender runs batched")
            return self.configure_all(contenders, BATCHED, calls)
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
                throttled(entry["clock_mhz"], reference_clock, self.throttle_tolerance) for entry in samples.values()
            )
            record = {"round": index, "seed": seed, "order": order, "samples": samples, "throttled": flagged,
                      "checked": False}
            rounds.append(record)
            if challenge and self.rng.random() < float(self.check["probability"]):
                self.check_sample_outputs(contenders, record, seed)
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
        if challenge and rounds and not any(each.get("sample_checked") for each in rounds):
            # The last round's sample is the latest the candidate side holds.
            self.check_sample_outputs(contenders, rounds[-1], rounds[-1]["seed"])
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
            precision = ratio_precision(
                [each["samples"][baseline]["time_us"] for each in rounds],
                [each["samples"][candidate]["time_us"] for each in rounds],
            )
            if precision is None or precision > target:
                return False
        return True

    def check_sample_outputs(self, contenders: dict, record: dict, seed: int) -> None:
        """Reads outputs of the candidate's sample of this round (one of its calls, at
        positions drawn now, after the sample) and checks them against the reference's own
        outputs on the same inputs. The samples' times are what a verdict rests on: a
        candidate that computes less when it believes it is timed (by the inputs' addresses,
        their version counters, their origin) is wrong there, whatever the trusted batches,
        which it may tell apart, saw."""
        candidate = contenders.get("candidate")
        if not isinstance(candidate, RemoteContender) or "candidate" not in record["samples"]:
            return
        torch = self.torch
        calls = max(1, int(record["samples"]["candidate"]["calls"]))
        call = self.rng.randrange(calls)
        with torch.no_grad():
            expected = trusted_clock.tensor_leaves(self.eager.function(*self.make_inputs(derive_seed(seed, call))), torch)
        positions = [self.sample_positions(leaf) if isinstance(leaf, torch.Tensor) else None for leaf in expected]
        with self.timed("sample_checks_s", self.round_costs):
            reply = candidate.request({"op": "sample_outputs", "call": call, "positions": positions}, ("sample_outputs",))
            gathered = reply.get("outputs")
            if not isinstance(gathered, list) or len(gathered) != len(expected):
                raise SessionError("timed_output_mismatch",
                                   f"round {record['round']}: the candidate side handed over"
                                   f" {len(gathered) if isinstance(gathered, list) else 'no'} outputs of a timed sample"
                                   f" where the reference returns {len(expected)}")
            atol, rtol = float(self.check["atol"]), float(self.check["rtol"])
            writers = reply.get("written_last_by")
            writers = writers if isinstance(writers, list) and len(writers) == len(expected) else [call] * len(expected)
            for index, (want, wanted, got) in enumerate(zip(expected, positions, gathered)):
                if wanted is None:
                    continue
                writer = writers[index]
                if isinstance(writer, int) and call < writer < calls:
                    # A buffer every call returns holds the last call's result: checked
                    # against that call's inputs (the trusted batches copy each call's
                    # outputs out of the way, so skipped calls show there).
                    with torch.no_grad():
                        later = trusted_clock.tensor_leaves(
                            self.eager.function(*self.make_inputs(derive_seed(seed, writer))), torch)
                    want = later[index]
                have = _decoded(torch, got, len(wanted))
                logical = torch.tensor(wanted, dtype=torch.long, device=want.device)
                problem = ("the values handed over are malformed" if have is None else
                           trusted_clock._mismatch(torch, want.reshape(-1)[logical].cpu(), have,
                                                   trusted_clock._scaled_atol(want, atol), rtol))
                if problem:
                    raise SessionError(
                        "timed_output_mismatch",
                        f"round {record['round']}: the outputs of a timed sample are wrong (call {call + 1} of"
                        f" {calls}, output {index}): {problem}. Timed calls are checked like any other: compute"
                        " the whole result on every call.", {"round": record["round"], "call": call, "output": index})
        record["sample_checked"] = True

    def sample_positions(self, leaf) -> list[int]:
        """Up to ``SAMPLE_CHECK_ELEMENTS`` logical positions of an output, drawn in secret."""
        numel = int(leaf.numel())
        if numel <= SAMPLE_CHECK_ELEMENTS:
            return list(range(numel))
        return sorted(self.rng.sample(range(numel), SAMPLE_CHECK_ELEMENTS))

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
            natural, _ = choose_regime(calibration, self.device.supports_graphs, self.short_kernel_us)
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
        regime, reason = choose_regime(calibration, self.device.supports_graphs, self.short_kernel_us)
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
        if regime == PER_CALL:
            return 1
        size = max(self.eager.bytes_per_call(self.seed()), candidate_bytes)
        return choose_calls_per_sample(min(calibration.values()), size)

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

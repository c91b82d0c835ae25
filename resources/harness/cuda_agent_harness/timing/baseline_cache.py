# SPDX-License-Identifier: Apache-2.0
"""Baseline timings (eager and torch.compile) kept between evaluations of one task, so
that evaluating the next candidate neither recompiles the reference nor re-times it.

An entry is identified by everything that changes what the baselines measure: the task's
content hash, the GPU model, the driver, the torch version (and CUDA and Triton with it),
the compile mode and backend, the shapes and dtypes of the inputs and the timing protocol.
Change any of them and the key, hence the file, changes: the old entry is simply never
read again. Each file holds one key and, per timing regime, the rounds of a session in
which only the baselines ran (no candidate process alive), with the clock they ran at.

Files are JSON, written atomically (temporary file, then rename), and checked on reading:
a file that does not parse, has another format or holds another key counts as a miss and
is overwritten by the next store. The directory must be writable by the trusted
evaluator only; candidates never see it.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import tempfile
from typing import Any

CACHE_FORMAT = 1

#: The parts of a key, in order. Every one of them must be present.
KEY_FIELDS = (
    "task_hash",
    "gpu",
    "driver",
    "torch",
    "compile_mode",
    "compile_backend",
    "input_signature",
    "protocol",
)


def make_key(**fields: Any) -> dict:
    """A cache key from exactly ``KEY_FIELDS`` (JSON-serializable values)."""
    missing = [name for name in KEY_FIELDS if name not in fields]
    unknown = [name for name in fields if name not in KEY_FIELDS]
    if missing or unknown:
        raise ValueError(f"baseline cache key: missing {missing}, unknown {unknown}")
    return {name: fields[name] for name in KEY_FIELDS}


def key_digest(key: dict) -> str:
    canonical = json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def input_signature(values: Any, torch: Any) -> list:
    """Shapes and dtypes of tensors, and the values of everything else, in order."""
    signature = []
    for value in values:
        if isinstance(value, torch.Tensor):
            signature.append({"shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", "")})
        elif isinstance(value, (list, tuple)):
            signature.append(input_signature(value, torch))
        elif isinstance(value, (int, float, bool, str)) or value is None:
            signature.append(value)
        else:
            signature.append(repr(value))
    return signature


def driver_version() -> str:
    """The NVIDIA kernel driver's version, or "none" where there is none."""
    try:
        with open("/proc/driver/nvidia/version") as handle:
            for word in handle.readline().split():
                if word[:1].isdigit() and "." in word:
                    return word
    except OSError:
        pass
    try:
        import ctypes

        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() == 0:
            buffer = ctypes.create_string_buffer(96)
            if nvml.nvmlSystemGetDriverVersion(buffer, ctypes.c_uint(96)) == 0:
                return buffer.value.decode()
    except (OSError, AttributeError):
        pass
    return "none"


def software_versions(torch: Any) -> str:
    parts = [f"torch {torch.__version__}"]
    if getattr(torch.version, "cuda", None):
        parts.append(f"cuda {torch.version.cuda}")
    try:
        import triton  # noqa: F401  (part of what torch.compile generates)

        parts.append(f"triton {triton.__version__}")
    except ImportError:
        pass
    return ", ".join(parts)


class BaselineCache:
    """A directory of baseline entries, one JSON file per key."""

    def __init__(self, directory: str):
        self.directory = directory

    def path_for(self, key: dict) -> str:
        return os.path.join(self.directory, f"baselines-{key_digest(key)[:32]}.json")

    def load(self, key: dict) -> tuple[dict | None, str]:
        """(entry, status), status being "hit", "miss" or "corrupt: <why>"."""
        path = self.path_for(key)
        try:
            with open(path, encoding="utf-8") as handle:
                entry = json.load(handle)
        except FileNotFoundError:
            return None, "miss"
        except (OSError, ValueError) as error:
            return None, f"corrupt: {type(error).__name__}: {error}"
        problem = _entry_problem(entry, key)
        if problem:
            return None, f"corrupt: {problem}"
        return entry, "hit"

    def regime(self, key: dict, regime: str) -> tuple[dict | None, str]:
        """The stored measurement for one regime, with the file's status."""
        entry, status = self.load(key)
        if entry is None:
            return None, status
        measurement = entry["regimes"].get(regime)
        return (measurement, "hit") if measurement else (None, "miss")

    def store(self, key: dict, regime: str, measurement: dict) -> str:
        """Adds (or replaces) one regime's measurement; other regimes of a sound file stay."""
        _require_measurement(measurement)
        entry, _ = self.load(key)
        if entry is None:
            entry = {"format": CACHE_FORMAT, "key": key, "regimes": {}}
        stamped = dict(measurement)
        stamped.setdefault("measured_at", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
        entry["regimes"][regime] = stamped
        os.makedirs(self.directory, exist_ok=True)
        path = self.path_for(key)
        descriptor, temporary = tempfile.mkstemp(prefix=".baselines-", suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(entry, handle, indent=1, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        except BaseException:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise
        return path


def _require_measurement(measurement: dict) -> None:
    problem = _measurement_problem(measurement)
    if problem:
        raise ValueError(f"baseline cache: refusing to store a measurement: {problem}")


def _measurement_problem(measurement: Any) -> str | None:
    if not isinstance(measurement, dict):
        return "a measurement is not an object"
    rounds = measurement.get("rounds")
    if not isinstance(rounds, list) or not rounds:
        return "a measurement has no rounds"
    for each in rounds:
        if not isinstance(each, dict):
            return "a round is not an object"
        for contender in ("eager", "compile"):
            value = each.get(contender)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                return f"a round lacks a positive {contender} time"
    if not isinstance(measurement.get("calibration_us"), dict):
        return "a measurement lacks calibration_us"
    return None


def _entry_problem(entry: Any, key: dict) -> str | None:
    if not isinstance(entry, dict):
        return "not a JSON object"
    if entry.get("format") != CACHE_FORMAT:
        return f"format {entry.get('format')!r}, expected {CACHE_FORMAT}"
    if entry.get("key") != key:
        return "the file holds another key"
    regimes = entry.get("regimes")
    if not isinstance(regimes, dict):
        return "no regimes"
    for name, measurement in regimes.items():
        problem = _measurement_problem(measurement)
        if problem:
            return f"regime {name}: {problem}"
    return None

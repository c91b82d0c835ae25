# SPDX-License-Identifier: Apache-2.0
"""Process-wide state a candidate must leave alone: the functions of torch, the Tensor class,
``torch.nn.functional``, the timers, the builtins, torch's global settings (cuDNN, TF32,
matmul precision, determinism, threads, default dtype), and the interpreter's hooks that run
code of their own inside the harness's (a profile or trace function, an import finder, a
garbage-collection callback). A snapshot taken before the candidate is imported is compared
after its import and after every call."""

from __future__ import annotations

import builtins
import gc
import sys
import threading
import time
import types

import torch
import torch.nn
import torch.nn.functional


def _watched() -> list[tuple[str, object]]:
    watched = [
        ("torch", torch), ("torch.Tensor", torch.Tensor), ("torch.nn.functional", torch.nn.functional),
        ("torch.nn.Module", torch.nn.Module), ("torch.cuda", torch.cuda), ("torch.testing", torch.testing),
        ("torch.cuda.Event", torch.cuda.Event), ("torch.cuda.Stream", torch.cuda.Stream), ("time", time),
        ("builtins", builtins), ("torch.autograd.profiler", torch.autograd.profiler),
    ]
    base = getattr(torch._C, "TensorBase", None) or getattr(torch._C, "_TensorBase", None)
    if base is not None:
        watched.append(("torch.Tensor (base)", base))
    return watched


def _is_watched_value(value) -> bool:
    return callable(value) and not isinstance(value, types.ModuleType)


def snapshot() -> dict[str, int]:
    """Identities of every callable in the watched namespaces."""
    identities: dict[str, int] = {}
    for label, namespace in _watched():
        try:
            items = list(vars(namespace).items())
        except TypeError:
            continue
        for name, value in items:
            if _is_watched_value(value):
                identities[f"{label}.{name}"] = id(value)
    return identities


def changed_functions(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """Names that were replaced, removed or added between two snapshots."""
    changed = [name for name, identity in before.items() if after.get(name) != identity]
    changed += [name for name in after if name not in before]
    return sorted(changed)


def _read(getter):
    try:
        return getter()
    except Exception:  # a setting this build of torch does not have
        return None


def _identity(value) -> str | None:
    return None if value is None else f"{type(value).__name__} at {id(value):#x}"


def interpreter_hooks() -> dict[str, object]:
    """Who the interpreter calls back from inside any code, the harness's included. Set
    from native code, where the scans do not see a Python name, a profile function sees
    every comparison's arguments and return values, and a finder every later import."""
    return {
        "sys.getprofile()": _read(lambda: _identity(sys.getprofile())),
        "sys.gettrace()": _read(lambda: _identity(sys.gettrace())),
        "threading.getprofile()": _read(lambda: _identity(threading.getprofile())),
        "threading.gettrace()": _read(lambda: _identity(threading.gettrace())),
        "sys.meta_path": _read(lambda: tuple(_identity(finder) for finder in sys.meta_path)),
        "sys.path_hooks": _read(lambda: tuple(_identity(hook) for hook in sys.path_hooks)),
        "gc.callbacks": _read(lambda: tuple(_identity(callback) for callback in gc.callbacks)),
    }


def global_settings() -> dict[str, object]:
    backends = torch.backends
    settings = {
        "torch.backends.cudnn.enabled": _read(lambda: backends.cudnn.enabled),
        "torch.backends.cudnn.benchmark": _read(lambda: backends.cudnn.benchmark),
        "torch.backends.cudnn.deterministic": _read(lambda: backends.cudnn.deterministic),
        "torch.backends.cudnn.allow_tf32": _read(lambda: backends.cudnn.allow_tf32),
        "torch.backends.cuda.matmul.allow_tf32": _read(lambda: backends.cuda.matmul.allow_tf32),
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
            _read(lambda: backends.cuda.matmul.allow_fp16_reduced_precision_reduction),
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
            _read(lambda: backends.cuda.matmul.allow_bf16_reduced_precision_reduction),
        "torch.backends.cuda.matmul.fp32_precision": _read(lambda: backends.cuda.matmul.fp32_precision),
        "torch.backends.cudnn.conv.fp32_precision": _read(lambda: backends.cudnn.conv.fp32_precision),
        "torch.backends.mkldnn.enabled": _read(lambda: backends.mkldnn.enabled),
        "torch.get_float32_matmul_precision()": _read(torch.get_float32_matmul_precision),
        "torch.are_deterministic_algorithms_enabled()": _read(torch.are_deterministic_algorithms_enabled),
        "torch.get_num_threads()": _read(torch.get_num_threads),
        "torch.get_default_dtype()": _read(lambda: str(torch.get_default_dtype())),
        "torch.is_grad_enabled()": _read(torch.is_grad_enabled),
        "torch.is_anomaly_enabled()": _read(torch.is_anomaly_enabled),
    }
    settings.update(interpreter_hooks())
    return settings


def changed_settings(before: dict[str, object], after: dict[str, object]) -> list[str]:
    return sorted(f"{name}: {before.get(name)!r} -> {after.get(name)!r}"
                  for name in set(before) | set(after) if before.get(name) != after.get(name))


class Integrity:
    """The state before the candidate, and the check of it afterwards."""

    def __init__(self):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.functions = snapshot()
            self.settings = global_settings()

    def violations(self) -> list[str]:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            problems = [f"replaced {name}" for name in changed_functions(self.functions, snapshot())]
            problems += [f"changed {change}" for change in changed_settings(self.settings, global_settings())]
        return problems

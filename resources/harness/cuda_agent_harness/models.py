# SPDX-License-Identifier: Apache-2.0
"""The task's reference module: loading it, building ``Model`` with seeded weights, and
generating input sets from seeds. The reference process and the candidate process both
do this and obtain the same weights and inputs bit for bit, so no tensor has to travel
between them; a fingerprint of each confirms it."""

from __future__ import annotations

import hashlib
import importlib.util
import random
import sys

import torch
import torch.nn as nn


class TaskError(Exception):
    """The task itself is broken (the reference fails, or is not reproducible)."""


def setup_device(device: str) -> None:
    if device == "cuda":
        if not torch.cuda.is_available():
            raise TaskError("device 'cuda' was requested but torch sees no CUDA device in this process")
        torch.cuda.init()
        torch.cuda.set_device(0)
        torch.empty(1, device="cuda")  # creates the context and the allocator now


def load_module(path: str, name: str):
    """Imports the Python file at ``path`` as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TaskError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_reference(path: str):
    try:
        module = load_module(path, "cuda_agent_reference")
    except Exception as error:
        raise TaskError(f"the reference module failed to import: {type(error).__name__}: {error}") from error
    for required in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, required):
            raise TaskError(f"the reference module defines no {required}")
    return module


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % (2**32))


def init_inputs(module, seed: int, device: str) -> list:
    seed_everything(seed)
    with torch.device(device):
        values = module.get_init_inputs()
    return list(values) if isinstance(values, (list, tuple)) else [values]


def perturb_normalization(model: nn.Module, seed: int) -> int:
    """Gives normalization layers non-trivial affine parameters and running statistics.
    Their defaults (weight 1, bias 0, mean 0, variance 1) make an evaluated BatchNorm the
    identity and let a candidate that ignores them pass."""
    generator = torch.Generator().manual_seed(seed)
    touched = 0
    norm_types = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
    for module in model.modules():
        if not isinstance(module, norm_types):
            continue
        with torch.no_grad():
            for name in ("weight", "bias", "running_mean", "running_var"):
                tensor = getattr(module, name, None)
                if not isinstance(tensor, torch.Tensor) or not tensor.dtype.is_floating_point:
                    continue
                shape = tensor.shape
                if name in ("weight", "running_var"):
                    values = torch.rand(shape, generator=generator) + 0.5
                else:
                    values = (torch.rand(shape, generator=generator) - 0.5)
                tensor.copy_(values.to(tensor.dtype))
                touched += 1
    return touched


def build_reference_model(module, init_seed: int, device: str, mode: str, perturb: bool):
    arguments = init_inputs(module, init_seed, device)
    seed_everything(init_seed)
    with torch.device(device):
        model = module.Model(*arguments)
    model = model.to(device)
    if perturb:
        perturb_normalization(model, init_seed + 1)
    model.train(mode == "train")
    return model, arguments


def generate_inputs(module, seed: int, scale: float, device: str) -> list:
    """One input set: ``get_inputs()`` under ``seed``, created on ``device``; floating-point
    tensors are multiplied by ``scale`` (stress sets that leave the default distribution)."""
    seed_everything(seed)
    with torch.device(device):
        values = module.get_inputs()
    values = list(values) if isinstance(values, (list, tuple)) else [values]
    result = []
    for value in values:
        if isinstance(value, torch.Tensor):
            value = value.to(device)
            if scale != 1.0 and value.dtype.is_floating_point:
                value = value * scale
            value = value.contiguous() if not value.is_contiguous() else value
        result.append(value)
    return result


def fingerprint(values) -> str:
    """A cheap digest of tensors (shape, dtype and up to 4096 evenly spaced elements)."""
    digest = hashlib.sha256()
    for value in values:
        if isinstance(value, torch.Tensor):
            digest.update(f"{tuple(value.shape)}{value.dtype}".encode())
            flat = value.detach().reshape(-1)
            if flat.numel():
                step = max(1, flat.numel() // 4096)
                sample = flat[::step][:4096]
                if sample.dtype in (torch.bfloat16, torch.float16) or sample.dtype.is_complex:
                    sample = sample.to(torch.complex128 if sample.dtype.is_complex else torch.float64)
                digest.update(sample.cpu().contiguous().view(torch.uint8).numpy().tobytes()
                              if _numpy() else str(sample.cpu().tolist()).encode())
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()[:32]


def _numpy() -> bool:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def state_fingerprint(state: dict) -> str:
    return fingerprint([state[name] for name in sorted(state)])


def signature_parameters(cls) -> list[str]:
    import inspect

    try:
        parameters = list(inspect.signature(cls.__init__).parameters.values())
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters[1:] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

# SPDX-License-Identifier: Apache-2.0
"""Fresh inputs for every sample: seeds derived per sample, input sets generated from them,
and the check that a task's inputs keep one structure across seeds (what a captured graph
needs)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .sampling import CaptureFailed


_SEED_STRIDE = 0x9E3779B97F4A7C15
_SEED_MASK = (1 << 63) - 1
#: Flipped in the seed of the samples that measure a lead: their input sets never coincide
#: with those of the sample that follows them.
_PROBE_SEED_BIT = 1 << 62


def derive_seed(seed: int, index: int) -> int:
    """The seed of the index-th input set of a sample (distinct, reproducible)."""
    return (seed + (index + 1) * _SEED_STRIDE) & _SEED_MASK


def _tensor_bytes(value: Any, torch: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(item, torch) for item in value)
    if isinstance(value, dict):
        return sum(_tensor_bytes(item, torch) for item in value.values())
    return 0


def _map_tensors(value: Any, torch: Any, function: Callable) -> Any:
    if isinstance(value, torch.Tensor):
        return function(value)
    if isinstance(value, list):
        return [_map_tensors(item, torch, function) for item in value]
    if isinstance(value, tuple):
        return tuple(_map_tensors(item, torch, function) for item in value)
    return value


def _require_fixed_structure(name: str, first: list, second: list, torch: Any) -> None:
    """A captured graph replays fixed shapes and constants: input sets from two seeds must
    differ only in tensor contents."""
    problem = None
    if len(first) != len(second):
        problem = f"get_inputs returned {len(first)} and then {len(second)} inputs"
    for position, (a, b) in enumerate(zip(first, second)):
        if problem:
            break
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            problem = f"input {position} is sometimes a tensor"
        elif isinstance(a, torch.Tensor) and (a.shape != b.shape or a.dtype != b.dtype):
            problem = f"input {position} changes shape or dtype between seeds"
        elif not isinstance(a, torch.Tensor) and a != b:
            problem = f"input {position} ({type(a).__name__}) changes between seeds"
    if problem:
        raise CaptureFailed(f"{name}: {problem}; a captured graph cannot follow it")


class InputFactory:
    """Fresh inputs of the task, reproducibly from a seed: ``get_inputs()`` with the RNG
    seeded, tensors created on the device directly (fast, and identical in every process
    on the same device), then moved there if ``get_inputs`` made them elsewhere."""

    def __init__(self, get_inputs: Callable[[], Sequence[Any]], device: Any):
        self.get_inputs = get_inputs
        self.device = device
        self.on_device = device.kind != "cpu"
        # The generators get_inputs draws from, seeded directly: what torch.manual_seed does
        # for them, without also seeding every other backend torch knows of, which took
        # 110 µs per call on a 2-core VM (1 µs this way), and a graph sample that refills
        # 16 to 95 input sets pays it that many times inside its enqueue.
        torch = device.torch
        self._generators: list | None = [torch.default_generator]
        if device.kind == "cuda":
            try:
                self._generators.append(torch.cuda.default_generators[device.index])
            except (AttributeError, IndexError):  # a torch that keeps them elsewhere
                self._generators = None

    def _seed(self, seed: int) -> None:
        if self._generators is None:
            self.device.torch.manual_seed(seed)
            return
        for generator in self._generators:
            generator.manual_seed(seed)

    def __call__(self, seed: int) -> list:
        torch = self.device.torch
        self._seed(seed)
        if self.on_device:
            try:
                with torch.device(self.device.torch_device):
                    inputs = list(self.get_inputs())
            except Exception:  # get_inputs that cannot run under a device context
                self.on_device = False
                self._seed(seed)
                inputs = list(self.get_inputs())
        else:
            inputs = list(self.get_inputs())
        return [
            item.to(self.device.torch_device) if isinstance(item, torch.Tensor) else item for item in inputs
        ]

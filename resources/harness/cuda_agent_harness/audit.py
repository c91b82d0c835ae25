# SPDX-License-Identifier: Apache-2.0
"""The ``audit`` handler: checks that a task can tell a real implementation from a null one.

A task whose outputs are insensitive to the computation (all outputs inside the tolerance
of zero, of a constant, of the input) would reward a candidate that computes nothing. For
each null model, the audit reports whether it would pass every input set; a sound task
rejects them all."""

from __future__ import annotations

import torch

from . import compare, models, tensorio
from .compare import Failure
from .reference import run_reference_sets
from .registry import handler


def _null_outputs(name: str, expected_tensors: list, inputs: list, first_set_means: list) -> list | None:
    made = []
    for position, tensor in enumerate(expected_tensors):
        if name == "zeros":
            made.append(torch.zeros_like(tensor))
        elif name == "constant":
            made.append(torch.full_like(tensor, first_set_means[position]))
        elif name == "mean":
            value = tensor.double().mean().item() if tensor.numel() and tensor.dtype.is_floating_point else 0
            made.append(torch.full_like(tensor, value))
        elif name == "passthrough":
            source = next((x for x in inputs if isinstance(x, torch.Tensor) and x.numel() == tensor.numel()), None)
            if source is None:
                return None
            made.append(source.reshape(tensor.shape).to(tensor.dtype))
    return made


@handler("audit")
def audit(args: dict, context) -> dict:
    """Args as for ``reference`` (no session): reference_path, device, init_seed, seeds, scales,
    mode, perturb_normalization, tolerance."""
    device = args.get("device", context.device)
    models.setup_device(device)
    module = models.load_reference(args["reference_path"])
    model, _ = models.build_reference_model(module, int(args["init_seed"]), device, args.get("mode", "eval"),
                                            bool(args.get("perturb_normalization", True)))
    expected = run_reference_sets(module, model, dict(args, check_reference_determinism=False), device)
    first_means = [t.double().mean().item() if t.numel() and t.dtype.is_floating_point else 0
                   for t in expected[0].tensors]
    results = {}
    for name in ("zeros", "constant", "mean", "passthrough"):
        verdict = {"passes": True, "message": ""}
        applicable = True
        for index, entry in enumerate(expected):
            scale = float(args.get("scales", [1.0] * len(expected))[index])
            inputs = models.generate_inputs(module, int(args["seeds"][index]), scale, device)
            outputs = _null_outputs(name, entry.tensors, inputs, first_means)
            if outputs is None:
                applicable = False
                break
            try:
                for path, want, got in zip(entry.leaves, entry.tensors, outputs):
                    compare.compare_tensor(want, got, compare.tolerance_for(args["tolerance"], want.dtype),
                                           compare.label(path))
            except Failure as failure:
                verdict = {"passes": False, "message": failure.message}
                break
        if applicable:
            results[name] = verdict
    passing = sorted(name for name, verdict in results.items() if verdict["passes"])
    return {"degenerate": bool(passing), "passing": passing, "null_models": results,
            "outputs": expected[0].description, "input_sets": len(expected)}

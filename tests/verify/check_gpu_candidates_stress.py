#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The hand-written GPU candidates (tests/gpu_candidates) under the verifier's weights,
stress inputs and tolerance, on the CPU.

For every task of tests/gpu_candidates/check_cpu_emulation.py, the reference Model is built
as the verifier builds it (every floating parameter and buffer perturbed:
``models.build_reference_model``), and the NumPy emulation of the correct candidate's kernels
is compared with it on
  - the task's own inputs, also scaled by 2 and by 4 (as a verification's last sets are);
  - every stress distribution of ``models.STRESS_KINDS``: its signed form, or its positive
    form where the signed one takes the reference out of its domain (non-finite outputs);
    distributions that leave the domain in both forms are skipped (a verification never
    uses them),
under the paper's tolerance with atol scaled to each output's magnitude
(``compare.effective_tolerance``). The correct emulation must match on every one of them;
the broken emulation must still be rejected on the task's own inputs. The audit itself
(which distributions a verification of the task adds) is reported per task, from the same
reduced sizes.

Usage: check_gpu_candidates_stress.py [--seed N] [--no-audit] [--fail-on-unfit] [filter ...]
Exit status 0 when every selected task behaves as described above; tasks the audit finds
unfit to be scored are listed (and counted as failures with --fail-on-unfit).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import random
import sys
import time

import torch

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, os.environ.get("CUDA_AGENT_HARNESS_DIR", str(ROOT / "resources" / "harness")))
sys.path.insert(0, str(ROOT / "tests" / "gpu_candidates"))

from cuda_agent_harness.verify import audit  # noqa: E402
from cuda_agent_harness.checks import compare  # noqa: E402
from cuda_agent_harness import models  # noqa: E402
import check_cpu_emulation as emulation  # noqa: E402


def mismatch(output: torch.Tensor, reference: torch.Tensor, tolerance: dict) -> str | None:
    """None when ``output`` matches under the verifier's comparison, else its message."""
    if tuple(output.shape) != tuple(reference.shape):
        return f"shape {tuple(output.shape)} instead of {tuple(reference.shape)}"
    try:
        compare.compare_tensor(reference, output.to(reference.dtype), compare.effective_tolerance(tolerance, reference),
                               "the output")
    except compare.Failure as failure:
        return f"{failure.reason}: {failure.message[:400]}"
    return None


def finite(tensor: torch.Tensor) -> bool:
    return bool(torch.isfinite(tensor).all())


def check_task(check, seed: int, run_audit: bool) -> str:
    """"pass", "unfit" (the correct emulation matches, but the audit finds that a null model
    passes every distribution: a verification reports task_unfit and scores nothing) or
    "fail"."""
    name = f"{check.level}/{check.stem}"
    started = time.monotonic()
    module = emulation.load_task(check.level, check.stem)
    for attribute, value in check.batch.items():
        setattr(module, attribute, value)
    model, _ = models.build_reference_model(module, seed, "cpu", "eval", True)
    rng = random.Random(seed)
    settings = [("own", None, 1.0), ("own x2", None, 2.0), ("own x4", None, 4.0)]
    settings += [(kind, {"kind": kind, "positive": False}, 1.0) for kind in models.STRESS_KINDS]
    problems, notes, broken_caught, unfit = [], [], False, False
    with torch.no_grad():
        for label, distribution, scale in settings:
            set_seed = rng.randrange(2**32)
            inputs = models.generate_inputs(module, set_seed, scale, "cpu", distribution)
            reference = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            if distribution is not None and not finite(reference):
                distribution = dict(distribution, positive=True)
                label += " (positive)"
                inputs = models.generate_inputs(module, set_seed, scale, "cpu", distribution)
                reference = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
                if not finite(reference):
                    notes.append(f"{label}: outside the reference's domain, skipped")
                    continue
            correct = check.emulate(model, inputs, broken=False)
            problem = mismatch(correct, reference, compare.PAPER)
            if problem:
                problems.append(f"{label}: correct emulation rejected: {problem}")
            if distribution is None and scale == 1.0:
                broken_caught = mismatch(check.emulate(model, inputs, broken=True), reference, compare.PAPER) is not None
    if not broken_caught:
        problems.append("own inputs: the broken emulation is no longer rejected")
    if run_audit:
        args = {"seeds": [rng.randrange(2**32) for _ in range(5)], "scales": [1.0, 1.0, 1.0, 2.0, 4.0],
                "tolerance": compare.PAPER}
        report = audit.audit_task(module, model, args, "cpu")
        stress = ", ".join(models.describe_distribution(spec) for spec in report["stress"]) or "none"
        notes.append(f"audit: null models passing the task's own inputs: {report['passing'] or 'none'}; stress added:"
                     f" {stress}; unfit: {report['unfit']}")
        if report["unfit"]:
            unfit = True
            notes.append(f"UNFIT: {report.get('message', '')}")
    status = "fail" if problems else "unfit" if unfit else "pass"
    print(f"{status.upper()} {name} [{time.monotonic() - started:.1f} s]")
    for line in problems + notes:
        print(f"     {line}")
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-audit", action="store_true")
    parser.add_argument("--fail-on-unfit", action="store_true", help="count tasks the audit finds unfit as failures")
    parser.add_argument("filters", nargs="*")
    args = parser.parse_args()
    selected = [c for c in emulation.CHECKS if not args.filters or any(f in f"{c.level}/{c.stem}" for f in args.filters)]
    statuses = {f"{c.level}/{c.stem}": check_task(c, args.seed, not args.no_audit) for c in selected}
    failed = [name for name, status in statuses.items() if status == "fail"]
    unfit = [name for name, status in statuses.items() if status == "unfit"]
    print(f"{len(selected) - len(failed)}/{len(selected)} tasks: the correct emulation matches under perturbed weights,"
          " stress inputs and the scaled tolerance; the broken one is still rejected")
    if unfit:
        print(f"{len(unfit)} of them unfit to be scored (a null model passes every distribution; their candidates get"
              f" task_unfit, not a verdict): {', '.join(unfit)}")
    return 1 if failed or (unfit and args.fail_on_unfit) else 0


if __name__ == "__main__":
    sys.exit(main())

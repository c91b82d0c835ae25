#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The null-model audit of KernelBench tasks, straight through the harness's audit (no
build, no sandbox): which tasks let a null model pass their own inputs, which stress
distributions rescue them, and which are unfit to be scored. The verifier's own test of
the same ("every KernelBench task tells a real implementation from a null model", in
gpu_candidates_test.cpp) runs it through HarnessVerifier::audit.

Usage: audit_kernelbench.py [--device cuda|cpu] [--strict] [--json FILE] [filter ...]
Prints one line per task with a finding and a summary; exit status 0 unless a task failed
to run (a reference that raises on its own inputs, say).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import sys
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, os.environ.get("CUDA_AGENT_HARNESS_DIR", str(ROOT / "resources" / "harness")))

import torch  # noqa: E402

from cuda_agent_harness.verify import audit  # noqa: E402
from cuda_agent_harness.checks import compare  # noqa: E402
from cuda_agent_harness import models  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("filters", nargs="*")
    args = parser.parse_args()
    tolerance = compare.STRICT if args.strict else compare.PAPER
    models.setup_device(args.device)
    files = sorted((ROOT / "tests" / "data" / "kernelbench").glob("level*/*.py"))
    files = [f for f in files if not args.filters or any(x in f"{f.parent.name}/{f.stem}" for x in args.filters)]
    report, errors, degenerate, unfit = {}, [], [], []
    rng = random.Random(args.seed)
    for index, path in enumerate(files):
        name = f"{path.parent.name}/{path.stem}"
        started = time.monotonic()
        try:
            module = models.load_module(str(path), f"kernelbench_{index}")
            model, _ = models.build_reference_model(module, rng.randrange(2**32), args.device, "eval", True)
            result = audit.audit_task(module, model, {"seeds": [rng.randrange(2**32) for _ in range(5)],
                                                      "scales": [1.0, 1.0, 1.0, 2.0, 4.0], "tolerance": tolerance},
                                      args.device)
            del model
        except Exception as error:  # reported, and the run goes on with the next task
            errors.append(name)
            report[name] = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-2000:]}
            print(f"ERROR {name}: {type(error).__name__}: {str(error)[:300]}", flush=True)
            continue
        finally:
            if args.device == "cuda":
                torch.cuda.empty_cache()
        result["seconds"] = time.monotonic() - started
        report[name] = {key: result[key] for key in ("degenerate", "passing", "stress", "unfit", "still_passing",
                                                     "seconds")}
        if result["degenerate"]:
            degenerate.append(name)
            stress = ", ".join(models.describe_distribution(spec) for spec in result["stress"]) or "none"
            print(f"{'UNFIT' if result['unfit'] else 'STRESS'} {name}: passing {result['passing']}; stress {stress}"
                  f"{'; still passing ' + str(result['still_passing']) if result['unfit'] else ''}"
                  f" [{result['seconds']:.1f} s]", flush=True)
            if result["unfit"]:
                unfit.append(name)
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
    print(f"{len(files)} tasks audited on {args.device} ({'strict' if args.strict else 'paper'} tolerance):"
          f" {len(degenerate)} let a null model pass their own inputs, {len(unfit)} of them unfit to be scored,"
          f" {len(errors)} failed to run")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

# SPDX-License-Identifier: Apache-2.0
"""What a timing request asks for, read on both sides: the defaults of its budget and of
its output checks, the torch.compile mode it names, the task (its hash, its reference
model built with seeded weights), and each comparison's share of the time left."""

from __future__ import annotations

import hashlib


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


def build_reference_model(torch, reference, init_seed: int, device, gains: dict | None = None):
    """The reference as the timing runs it: its weights perturbed as the verification
    perturbs them, and multiplied by the task audit's ``gains`` (weights too small for the
    tolerance to see). Timed with the weights as initialised, a kernel that treats a fresh
    BatchNorm as an identity or skips a zero-initialised branch would compute the right
    outputs exactly when timed, and only then."""
    from ..models import apply_weight_gains, perturb_parameters  # imports torch, which the caller has by now

    torch.manual_seed(init_seed)
    model = reference.Model(*reference.get_init_inputs()).to(device.torch_device)
    perturb_parameters(model, init_seed + 1)
    apply_weight_gains(model, gains)
    return model.eval()


def task_hash_of(reference_path: str) -> str:
    """The task's content hash, computed as the C++ Task::content_hash does."""
    with open(reference_path, "rb") as handle:
        source = handle.read()
    return hashlib.sha256(b"cuda-agent task v1\n" + source).hexdigest()


def _compile_mode(settings: dict):
    mode = settings.get("mode", "default")
    return None if mode in (None, "default") else mode


def comparison_share_s(seconds_left: float, comparisons_left: int, most_s: float) -> float:
    """Seconds for the next comparison of a session held to a time limit: what is left of
    the limit (the overhead so far is already spent) shared over the comparisons still
    owed, at most ``most_s``, never negative."""
    return max(0.0, min(most_s, seconds_left / max(1, comparisons_left)))

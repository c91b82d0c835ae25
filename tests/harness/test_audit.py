# SPDX-License-Identifier: Apache-2.0
"""The null-model audit: a task whose own inputs let a null model pass gets stress inputs
that make every null model fail, within the reference's domain; a task that no
distribution rescues is unfit to be scored; a sound task needs nothing."""

import random
import types

import torch

from cuda_agent_harness.verify import audit
from cuda_agent_harness.checks import compare
from cuda_agent_harness import models


def task(forward: str, inputs: str, init: str = "", init_inputs: str = "[]"):
    """A task module with ``forward`` (an expression of x) and ``get_inputs``' list."""
    source = f"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self{', ' + init if init else ''}):
        super().__init__()

    def forward(self, x):
        return {forward}


def get_inputs():
    return {inputs}


def get_init_inputs():
    return {init_inputs}
"""
    module = types.ModuleType("audited_task")
    exec(compile(source, "audited_task.py", "exec"), module.__dict__)
    return module


def run(module, tolerance=compare.PAPER, seed=0):
    model, _ = models.build_reference_model(module, seed, "cpu", "eval", True)
    rng = random.Random(seed)
    args = {"seeds": [rng.randrange(2**32) for _ in range(5)], "scales": [1.0, 1.0, 1.0, 2.0, 4.0],
            "tolerance": tolerance}
    return audit.audit_task(module, model, args, "cpu")


def test_a_sound_task_needs_only_heavy_tailed_inputs():
    # No null model passes, yet heavy tails are added: statistics from a sample of the
    # elements pass any task on identically distributed inputs.
    report = run(task("torch.relu(x)", "[torch.randn(16, 256)]"))
    assert not report["degenerate"] and report["passing"] == []
    heavy_tailed = {"kind": "heavy_tailed", "positive": False}
    assert report["stress"] == [heavy_tailed] + [{"kind": "sparse", "stress": heavy_tailed}] * audit.SPARSE_SETS
    assert not report["unfit"]
    assert set(report["null_models"]) == {"zeros", "constant", "mean", "passthrough", "replay"}
    assert all(not verdict["passes"] for verdict in report["null_models"].values())
    assert "input set" in report["null_models"]["passthrough"]["message"]


def test_an_activation_of_rand_inputs_gets_sign_symmetric_stress_inputs_and_sparse_sets_of_them():
    report = run(task("torch.relu(x)", "[torch.rand(16, 256)]"))
    assert report["degenerate"] and report["passing"] == ["passthrough"]
    sign_symmetric = {"kind": "sign_symmetric", "positive": False}
    assert report["stress"][0] == sign_symmetric
    # a kernel that copies its input when a sample of it has no negative value computes on the
    # stress inputs; the sparse sets hide one negative value among torch.rand's
    sparse = [spec for spec in report["stress"] if spec["kind"] == "sparse"]
    assert sparse == [{"kind": "sparse", "stress": sign_symmetric}] * audit.SPARSE_SETS
    assert report["stress"][-len(sparse):] == sparse
    assert not report["unfit"] and report["still_passing"] == []
    probed = [entry for entry in report["tried"] if entry["distribution"]["kind"] == "sparse"]
    assert len(probed) == 1 and probed[0]["in_domain"]


def test_sparse_sets_stay_in_the_reference_s_domain():
    # A log of torch.rand inputs: signed stress inputs leave its domain, so the positive form
    # is kept, and the sparse sets take their element from it.
    report = run(task("torch.log(x)", "[torch.rand(16, 256) + 0.5]"))
    kept = [spec for spec in report["stress"] if spec["kind"] != "sparse"]
    assert kept and all(spec["positive"] for spec in kept)
    assert [spec for spec in report["stress"] if spec["kind"] == "sparse"] == \
        [{"kind": "sparse", "stress": kept[0]}] * audit.SPARSE_SETS


def test_a_sample_friendly_statistic_also_gets_heavy_tailed_inputs():
    report = run(task("torch.mean(x, dim=-1)", "[torch.rand(8, 65536)]"))
    assert "mean" in report["passing"]
    kinds = [spec["kind"] for spec in report["stress"] if spec["kind"] != "sparse"]
    assert "heavy_tailed" in kinds and len(kinds) == 2
    assert not report["unfit"]


def test_stress_inputs_stay_in_the_reference_s_domain():
    # sqrt of a constant input: every output of a set equals every other (the mean null
    # model passes), and signed stress inputs take sqrt out of its domain.
    report = run(task("torch.sqrt(x)", "[torch.ones(16, 64) * 4]"))
    assert "mean" in report["passing"]
    assert report["stress"] and all(spec.get("stress", spec)["positive"] for spec in report["stress"])
    signed = [entry for entry in report["tried"]
              if entry["distribution"]["kind"] in models.STRESS_KINDS and not entry["distribution"]["positive"]]
    assert signed and not any(entry["in_domain"] for entry in signed)
    assert all("not finite" in entry["why"] for entry in signed)
    assert not report["unfit"]


def test_a_task_that_no_distribution_rescues_is_unfit_and_says_which_null_model_passes():
    report = run(task("torch.softmax(x, dim=1).mean(dim=1) * 64", "[torch.randn(8, 64)]"))
    assert report["unfit"] and report["stress"] == [], "no sparse sets either"
    assert all(entry["distribution"]["kind"] != "sparse" for entry in report["tried"])
    assert "constant" in report["still_passing"]
    assert "constant" in report["message"] and "not scored" in report["message"]
    assert all(entry["in_domain"] for entry in report["tried"])


def test_tiny_outputs_are_no_longer_matched_by_zeros():
    softmax = task("torch.softmax(torch.nn.functional.layer_norm(x, (x.shape[-1],)), dim=-1)",
                   "[torch.randn(8, 16384)]")
    unscaled = dict(compare.PAPER)
    del unscaled["atol_scale"]
    assert "zeros" in run(softmax, unscaled)["passing"], "within an atol of 1e-2 as given"
    assert "zeros" not in run(softmax)["passing"], "not once atol follows the output's magnitude"


def test_the_audit_records_the_hidden_state_a_recurrent_reference_replaces_every_call():
    source = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.Linear(24, 8)
        self.hidden = torch.randn(16, 8)

    def forward(self, x):
        self.hidden = self.hidden.to(x.device)
        self.hidden = torch.tanh(self.cell(torch.cat((x, self.hidden), dim=1)))
        return self.hidden


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
"""
    module = types.ModuleType("recurrent_task")
    exec(compile(source, "recurrent_task.py", "exec"), module.__dict__)
    assert run(module)["kept_state"] == {"hidden": {"shape": [16, 8], "dtype": "torch.float32"}}
    assert run(task("torch.relu(x)", "[torch.randn(16, 256)]"))["kept_state"] == {}


def test_a_normalizing_task_gets_a_flat_set_and_an_elementwise_one_does_not():
    layer_norm = task("torch.nn.functional.layer_norm(x, x.shape[1:])", "[torch.rand(8, 4, 16)]")
    report = run(layer_norm)
    assert report["normalizations"] == ["native_layer_norm"]
    assert report["stress"][-1] == {"kind": models.FLAT}
    rms_norm = task("x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)", "[torch.randn(8, 64)]")
    report = run(rms_norm)
    assert report["normalizations"] == ["mean", "sqrt"] and report["stress"][-1] == {"kind": models.FLAT}
    assert run(task("torch.relu(x)", "[torch.randn(16, 256)]"))["normalizations"] == []
    assert {"kind": models.FLAT} not in run(task("torch.relu(x)", "[torch.randn(16, 256)]"))["stress"]


def test_a_flat_set_leaves_a_reference_that_divides_by_the_deviation_out_of_its_domain():
    # Without an epsilon the reference itself divides by zero on a constant slice: the flat
    # set is not in its domain, and the task keeps its other sets.
    report = run(task("(x - x.mean(1, keepdim=True)) / x.std(1, keepdim=True)", "[torch.rand(8, 64)]"))
    assert report["normalizations"] and {"kind": models.FLAT} not in report["stress"]
    flat = next(entry for entry in report["tried"] if entry["distribution"] == {"kind": models.FLAT})
    assert not flat["in_domain"] and "not finite" in flat["why"]


def test_a_task_that_only_moves_data_is_unfit_and_says_why():
    report = run(task("torch.cat([x, x.t().contiguous()], dim=0)", "[torch.randn(32, 32)]"))
    assert report["moves_only"] and report["unfit"]
    assert "only moves data" in report["message"] and "cat" in report["message"]
    computing = run(task("torch.cat([x, x.t().contiguous()], dim=0) * 2", "[torch.randn(32, 32)]"))
    assert not computing["moves_only"] and not computing["unfit"]


def scalar_task(forward: str):
    return two_input_task(forward, "[torch.randn(16, 64), 2.0]", second="s")


def test_a_number_among_the_inputs_is_negated_in_one_set_where_the_reference_allows_it():
    negated = {"kind": models.NEGATED_SCALARS}
    assert negated in run(scalar_task("torch.amax(x * s, dim=1)"))["stress"]
    # The reference leaves its domain with a negative number: no such set.
    report = run(scalar_task("torch.nn.functional.dropout(x, p=s / 4, training=False) * torch.sqrt(torch.tensor(s))"))
    assert negated not in report["stress"] and not report["unfit"]
    assert negated not in run(task("torch.relu(x)", "[torch.randn(16, 256)]"))["stress"], "no number, no such set"


def two_input_task(forward: str, inputs: str, second: str = "n"):
    """A task module whose forward takes x and a second input named ``second``."""
    source = f"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, {second}):
        return {forward}


def get_inputs():
    return {inputs}


def get_init_inputs():
    return []
"""
    module = types.ModuleType("two_input_task")
    exec(compile(source, "two_input_task.py", "exec"), module.__dict__)
    return module


def test_an_integer_operand_is_shifted_in_one_set_and_an_integer_size_is_not():
    shifted = {"kind": models.SHIFTED_INTEGERS}
    assert shifted in run(two_input_task("torch.pow(x, n)", "[torch.randn(16, 64), 3]"))["stress"]
    # The integer sets a size: the outputs change shape, so it is no operand.
    report = run(two_input_task("x[:, :n].relu()", "[torch.randn(16, 64), 32]"))
    assert shifted not in report["stress"] and not report["unfit"]
    entry = next(entry for entry in report["tried"] if entry["distribution"] == shifted)
    assert not entry["in_domain"] and "change shape" in entry["why"]


def test_targets_of_a_cross_entropy_hold_its_ignore_index_in_one_set():
    sentinel = {"kind": models.INTEGER_SENTINELS, "value": -100}
    report = run(two_input_task("torch.nn.functional.cross_entropy(x, n, reduction='none')",
                                "[torch.randn(64, 10), torch.randint(0, 10, (64,))]"))
    assert sentinel in report["stress"] and not report["unfit"]
    # Integer tensors of other operators keep their values: nothing treats -100 apart there.
    report = run(two_input_task("x[n]", "[torch.randn(64, 10), torch.randint(0, 64, (64,))]"))
    assert not any(entry["distribution"]["kind"] == models.INTEGER_SENTINELS for entry in report["tried"])


def test_a_cross_entropy_also_gets_sets_where_nearly_every_target_is_ignored():
    # With one target in 16 ignored, a mean over the others moves by far less than the
    # tolerance, and a kernel that counts ignored targets as a class passes; with all but a
    # few ignored, the mean is theirs alone.
    report = run(two_input_task("torch.nn.functional.cross_entropy(x, n)",
                                "[torch.randn(512, 100), torch.randint(0, 100, (512,))]"))
    dense = {"kind": models.INTEGER_SENTINELS, "value": -100, "dense": True}
    assert report["stress"].count(dense) == audit.DENSE_SENTINEL_SETS
    assert {"kind": models.INTEGER_SENTINELS, "value": -100} in report["stress"]


def test_a_weight_too_small_for_the_tolerance_to_see_gets_a_gain_that_makes_leaving_it_out_fail():
    source = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(256, 256, bias=False)
        self.shift = nn.Parameter(torch.empty(256))
        nn.init.normal_(self.shift, std=5e-4)
        self.unused = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return self.proj(x) + self.shift


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
"""
    module = types.ModuleType("tiny_shift_task")
    exec(compile(source, "tiny_shift_task.py", "exec"), module.__dict__)
    report = run(module)
    gains = report["weight_gains"]
    # The projection is visible as it is; the shift only with a gain; an unused tensor never.
    assert set(gains) == {"shift"} and gains["shift"] in audit.WEIGHT_GAINS
    assert report["weight_gain_search"]["invisible"] == ["unused"]
    # Built with the gains, leaving the shift out is a mismatch; built without them, it is not.
    inputs = models.generate_inputs(module, 3, 1.0, "cpu")
    for applied, visible in ((gains, True), (None, False)):
        model, _ = models.build_reference_model(module, 5, "cpu", "eval", True, applied)
        with torch.no_grad():
            expected, skipped = model(*inputs), model.proj(*inputs)
        tolerance = compare.effective_tolerance(compare.PAPER, expected)
        try:
            compare.compare_tensor(expected, skipped, tolerance, "output")
            caught = False
        except compare.Failure:
            caught = True
        assert caught == visible
    # The audit's model comes back with the gains and otherwise as it was built.
    model, _ = models.build_reference_model(module, 0, "cpu", "eval", True, gains)
    audited, _ = models.build_reference_model(module, 0, "cpu", "eval", True)
    audit.weight_gains(module, audited, {"seeds": [1], "scales": [1.0], "tolerance": compare.PAPER}, "cpu")
    for name, value in model.state_dict().items():
        assert torch.equal(value, audited.state_dict()[name]), name


def test_an_exponential_too_steep_for_the_full_heavy_tail_gets_a_milder_one():
    report = run(task("torch.exp(x).mean(dim=-1)", "[torch.rand(16, 4096) * torch.rand(16, 1)]"))
    mild = [spec for spec in report["stress"] if spec.get("spike") == models.MILD_HEAVY_TAIL_SPIKE]
    assert mild and mild[0]["kind"] == "heavy_tailed" and not report["unfit"]
    full = [entry for entry in report["tried"] if entry["distribution"]["kind"] == "heavy_tailed"
            and "spike" not in entry["distribution"]]
    assert full and not any(entry["in_domain"] for entry in full)


def test_integer_settings_named_as_special_values_are_held_by_the_integer_inputs_of_one_set():
    source = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, pad_id, hidden):
        super().__init__()
        self.pad_id = pad_id
        self.hidden = hidden

    def forward(self, x, tokens):
        mask = (tokens != self.pad_id).to(x.dtype)
        return (x * mask.unsqueeze(-1)).sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp_min(1.0)


def get_inputs():
    return [torch.randn(8, 32, 16), torch.randint(1, 100, (8, 32))]


def get_init_inputs():
    return [0, 16]
"""
    module = types.ModuleType("masked_mean_task")
    exec(compile(source, "masked_mean_task.py", "exec"), module.__dict__)
    report = run(module)
    # The padding id the tokens never hold gets a set of its own; a size named otherwise does not.
    assert {"kind": models.INTEGER_SENTINELS, "value": 0} in report["stress"] and not report["unfit"]
    assert not any(entry["distribution"] == {"kind": models.INTEGER_SENTINELS, "value": 16} for entry in report["tried"])

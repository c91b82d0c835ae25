# SPDX-License-Identifier: Apache-2.0
"""Weights and inputs that expose shortcuts: every floating parameter and buffer perturbed,
reproducibly and at its own scale; stress distributions of the inputs, reproducible and
what their names say."""

import math

import pytest
import torch
import torch.nn as nn

from cuda_agent_harness import models


class Everything(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 16)
        self.norm = nn.BatchNorm1d(16)
        self.layer_norm = nn.LayerNorm(16)
        self.gain = nn.Parameter(torch.ones(16))
        self.offset = nn.Parameter(torch.zeros(16))
        self.halves = nn.Parameter(torch.full((64,), 0.5))
        self.tiny = nn.Parameter(torch.full((64,), 1e-5))  # LayerScale's initial gain
        self.positive = nn.Parameter(torch.rand(64) + 0.1)
        self.register_buffer("mask", torch.tril(torch.ones(6, 6)))
        self.register_buffer("positions", torch.arange(8, dtype=torch.float32))
        self.register_buffer("scale", torch.ones(1))
        self.register_buffer("private", torch.ones(3), persistent=False)
        self.register_buffer("counts", torch.tensor([3, 4]))
        self.tied = self.linear.weight


def built(seed=0):
    torch.manual_seed(1)
    model = Everything()
    before = {name: value.clone() for name, value in model.state_dict(keep_vars=False).items()}
    touched = models.perturb_parameters(model, seed)
    return model, before, touched


def rms(tensor):
    return float(tensor.double().pow(2).mean().sqrt())


def test_every_floating_parameter_and_persistent_buffer_changes_except_masks_and_index_tables():
    model, before, touched = built()
    after = model.state_dict()
    for name in ("linear.bias", "norm.weight", "norm.bias", "norm.running_mean", "norm.running_var",
                 "layer_norm.weight", "layer_norm.bias", "gain", "offset", "halves", "positive", "scale"):
        assert name in touched, name
        assert not torch.equal(after[name], before[name]), name
    for name in ("mask", "positions", "counts", "norm.num_batches_tracked"):
        assert name not in touched and torch.equal(after[name], before[name]), name
    assert torch.equal(model.private, torch.ones(3)), "buffers outside the state dict stay (the candidate never gets them)"
    # A tied tensor is perturbed once, under whichever of its names comes first.
    assert model.tied is model.linear.weight and ("tied" in touched) != ("linear.weight" in touched)
    assert not torch.equal(model.linear.weight, before["linear.weight"])


def test_constants_stop_being_constant_parameters_take_both_signs_and_zeros_borrow_their_module_scale():
    model, before, _ = built()
    for name in ("norm.running_var", "scale"):  # buffers keep their sign and their scale
        value, level = model.state_dict()[name], float(before[name].flatten()[0])
        if value.numel() > 1:
            assert float(value.std()) > 0.05 * level, name
        assert bool(((value > 0.5 * level - 1e-6) & (value < 1.5 * level + 1e-6)).all()), name
    assert bool((model.norm.running_var > 0).all()), "a variance stays positive"
    # Parameters: a quarter or so negative, at their own scale or their module's (one at least).
    for name, level in (("gain", 1.0), ("halves", 1.0), ("norm.weight", 1.0), ("layer_norm.weight", 1.0),
                        ("tiny", 1.0)):
        value = model.state_dict()[name]
        magnitude = value.abs()
        assert bool(((magnitude > 0.5 * level - 1e-6) & (magnitude < 1.5 * level + 1e-6)).all()), name
        assert bool((value < 0).any()) and float((value < 0).float().mean()) < 0.6, name
    # A zero bias of BatchNorm takes the scale of its weight (1): values up to +-0.5.
    assert 0.1 < float(model.norm.bias.abs().max()) <= 0.5
    assert float(model.offset.abs().max()) > 0.05


def test_random_tensors_keep_their_scale_and_sign_definite_ones_their_sign():
    model, before, _ = built()
    for name in ("linear.weight", "linear.bias"):
        ratio = rms(model.state_dict()[name]) / rms(before[name])
        assert 0.85 < ratio < 1.2, (name, ratio)
        correlation = torch.corrcoef(torch.stack([model.state_dict()[name].flatten(), before[name].flatten()]))[0, 1]
        assert correlation > 0.9, "the perturbation keeps the values, it does not redraw them"
    assert bool((model.positive > 0).all())
    assert 0.85 < rms(model.positive) / rms(before["positive"]) < 1.2


def test_the_perturbation_is_reproducible_and_depends_on_the_seed():
    first, _, _ = built(seed=5)
    second, _, _ = built(seed=5)
    third, _, _ = built(seed=6)
    for name, value in first.state_dict().items():
        assert torch.equal(value, second.state_dict()[name]), name
    assert not torch.equal(first.gain, third.gain)
    assert models.state_fingerprint(first.state_dict()) == models.state_fingerprint(second.state_dict())
    assert models.state_fingerprint(first.state_dict()) != models.state_fingerprint(third.state_dict())


def test_a_tensor_s_noise_does_not_depend_on_the_model_s_other_tensors():
    class Fewer(nn.Module):
        def __init__(self):
            super().__init__()
            self.gain = nn.Parameter(torch.ones(16))

    alone = Fewer()
    models.perturb_parameters(alone, 5)
    full, _, _ = built(seed=5)
    assert torch.equal(alone.gain, full.gain)


class Task:
    """A module with get_inputs, as a task file defines it."""

    @staticmethod
    def get_inputs():
        return [torch.rand(64, 256), torch.randint(0, 10, (64,)), 3.0]


@pytest.mark.parametrize("kind", models.STRESS_KINDS)
@pytest.mark.parametrize("positive", [False, True])
def test_stress_inputs_are_reproducible_and_keep_shape_dtype_and_non_floating_inputs(kind, positive):
    spec = {"kind": kind, "positive": positive}
    first = models.generate_inputs(Task, 11, 1.0, "cpu", spec)
    again = models.generate_inputs(Task, 11, 1.0, "cpu", spec)
    other = models.generate_inputs(Task, 12, 1.0, "cpu", spec)
    own = models.generate_inputs(Task, 11, 1.0, "cpu")
    assert torch.equal(first[0], again[0]) and not torch.equal(first[0], other[0])
    assert first[0].shape == own[0].shape and first[0].dtype == own[0].dtype
    assert not torch.equal(first[0], own[0])
    assert torch.equal(first[1], own[1]), "integer tensors are the task's own"
    assert first[2] == own[2] == 3.0 * models.scalar_factor(11, 2), "a number changes with the seed, not the distribution"
    assert models.fingerprint(first) == models.fingerprint(again)
    assert bool(torch.isfinite(first[0]).all())
    if positive:
        assert bool((first[0] >= 0).all())


def test_each_stress_kind_does_what_its_name_says():
    own = models.generate_inputs(Task, 3, 1.0, "cpu")[0]
    draw = {kind: models.generate_inputs(Task, 3, 1.0, "cpu", {"kind": kind, "positive": False})[0]
            for kind in models.STRESS_KINDS}
    assert float(own.min()) >= 0
    symmetric = draw["sign_symmetric"]
    assert 0.3 < float((symmetric < 0).float().mean()) < 0.7, "negative values where torch.rand has none"
    assert 0.8 < rms(symmetric) / rms(own) < 1.25, "at the inputs' own scale"
    shift = float(draw["shifted"].mean() - own.mean())
    assert abs(shift) > 3 * float(own.std())
    assert torch.allclose(draw["shifted"] - shift, own, atol=1e-5), "the same values, moved"
    heavy = draw["heavy_tailed"].double()
    kurtosis = float(((heavy - heavy.mean()) ** 4).mean() / heavy.var() ** 2)
    assert kurtosis > 10, "far heavier tails than a normal distribution's (3)"
    for seed in range(8):  # a spike of each sign in every draw: softmax without its max shift overflows on one
        spiky = models.generate_inputs(Task, seed, 1.0, "cpu", {"kind": "heavy_tailed", "positive": False})[0]
        peak = models.HEAVY_TAIL_SPIKE * rms(own)
        assert float(spiky.max()) > 0.5 * peak and float(spiky.min()) < -0.5 * peak, seed
    structured = draw["structured"].double()
    row_means = structured.mean(dim=1)
    column_means = structured.mean(dim=0)
    assert float(row_means.std()) > 3 * float(structured.std()) / 256 ** 0.5, "rows differ more than by chance"
    assert float(column_means.std()) > 2 * float(structured.std()) / 64 ** 0.5, "columns too"
    assert models.generate_inputs(Task, 3, 1.0, "cpu", {"kind": "shifted", "positive": True})[0].min() > own.min()


def test_scaling_applies_to_stress_inputs_too_and_unknown_distributions_are_refused():
    spec = {"kind": "heavy_tailed", "positive": False}
    plain = models.generate_inputs(Task, 4, 1.0, "cpu", spec)[0]
    scaled = models.generate_inputs(Task, 4, 2.0, "cpu", spec)[0]
    assert torch.allclose(scaled, plain * 2)
    with pytest.raises(models.DistributionError):
        models.generate_inputs(Task, 4, 1.0, "cpu", {"kind": "gaussian"})


def test_numbers_among_the_inputs_change_from_set_to_set_within_their_range():
    factors = {models.generate_inputs(Task, seed, 1.0, "cpu")[2] / 3.0 for seed in range(20)}
    low, high = models.SCALAR_FACTOR_RANGE
    assert len(factors) == 20 and all(low <= factor < high for factor in factors)


def test_a_near_repeat_moves_a_few_elements_of_its_base_set_only():
    base = models.generate_inputs(Task, 11, 1.0, "cpu")
    spec = {"kind": models.NEAR_REPEAT, "base": [11, 1.0, None]}
    near = models.generate_inputs(Task, 99, 1.0, "cpu", spec)
    again = models.generate_inputs(Task, 99, 1.0, "cpu", spec)
    assert torch.equal(near[0], again[0]) and torch.equal(near[1], base[1]) and near[2] == base[2]
    changed = int((near[0] != base[0]).sum())
    moved = near[0].numel() // models.NEAR_REPEAT_ELEMENTS
    # scattered elements, and a run of as many consecutive ones copied from elsewhere
    assert moved < changed <= 2 * moved
    flat_near, flat_base = near[0].reshape(-1), base[0].reshape(-1)
    differs = (flat_near != flat_base).unfold(0, moved, 1).all(dim=1)
    windows = flat_base.unfold(0, moved, 1)
    copied = [start for start in differs.nonzero().reshape(-1).tolist()
              if (windows == flat_near[start:start + moved]).all(dim=1).any()]
    assert copied, "a run of consecutive elements copied from another place"
    # the values that moved are the set's own values: the inputs stay in the task's domain
    assert set(near[0].reshape(-1).tolist()) <= set(base[0].reshape(-1).tolist())
    with pytest.raises(models.DistributionError):
        models.check_distribution({"kind": models.NEAR_REPEAT, "base": [11, 1.0, spec]})


def test_heavy_tails_defeat_statistics_taken_from_a_sample_of_a_long_reduction():
    # A layer norm over 4 M elements whose variance comes from every 16th element: on the
    # task's own inputs it is right to 0.1%; heavy tails must put it far outside tolerance.
    class Wide:
        @staticmethod
        def get_inputs():
            return [torch.rand(2, 1 << 22)]

    def sampled_layer_norm(x):
        sample = x[:, ::16].double()
        mean, variance = sample.mean(dim=1, keepdim=True), sample.var(dim=1, unbiased=False, keepdim=True)
        return ((x.double() - mean) / (variance + 1e-5).sqrt()).float()

    def layer_norm(x):
        return torch.nn.functional.layer_norm(x, x.shape[1:])

    def within_tolerance(x):
        return bool(torch.allclose(sampled_layer_norm(x), layer_norm(x), atol=1e-2, rtol=1e-2))

    assert within_tolerance(models.generate_inputs(Wide, 5, 1.0, "cpu")[0])
    heavy = [models.generate_inputs(Wide, seed, 1.0, "cpu", {"kind": "heavy_tailed", "positive": False})[0]
             for seed in range(4)]
    assert sum(not within_tolerance(x) for x in heavy) >= 3


def test_heavy_tails_defeat_a_mean_taken_from_every_16th_element():
    # The mean from every 16th of 4 M elements is off by 0.002 of the deviation on any
    # identically distributed input, spikes or not; the offsets by each index's power of two
    # put every such sample off by the inputs' scale, four times over.
    class Wide:
        @staticmethod
        def get_inputs():
            return [torch.rand(2, 1 << 22)]

    def strided_mean_layer_norm(x):
        mean = x[:, ::16].double().mean(dim=1, keepdim=True)
        variance = ((x.double() - mean) ** 2).mean(dim=1, keepdim=True)
        return ((x.double() - mean) / (variance + 1e-5).sqrt()).float()

    def within_tolerance(x):
        reference = torch.nn.functional.layer_norm(x, x.shape[1:])
        return bool(torch.allclose(strided_mean_layer_norm(x), reference, atol=1e-2, rtol=1e-2))

    assert within_tolerance(models.generate_inputs(Wide, 5, 1.0, "cpu")[0])
    heavy = [models.generate_inputs(Wide, seed, 1.0, "cpu", {"kind": "heavy_tailed", "positive": False})[0]
             for seed in range(3)]
    assert not any(within_tolerance(x) for x in heavy)


SIGN_SYMMETRIC = {"kind": "sign_symmetric", "positive": False}


def sparse(stress=SIGN_SYMMETRIC):
    return {"kind": models.SPARSE, "stress": stress}


def test_a_sparse_set_is_the_task_s_own_inputs_but_for_one_stress_element_off_the_usual_samples():
    own = models.generate_inputs(Task, 21, 1.0, "cpu")
    stress = models.generate_inputs(Task, 21, 1.0, "cpu", SIGN_SYMMETRIC)
    drawn = models.generate_inputs(Task, 21, 1.0, "cpu", sparse())
    again = models.generate_inputs(Task, 21, 1.0, "cpu", sparse())
    assert torch.equal(drawn[0], again[0]) and drawn[0].dtype == own[0].dtype and drawn[0].shape == own[0].shape
    assert torch.equal(drawn[1], own[1]) and drawn[2] == own[2], "integers and numbers as in the task's own set"
    changed = (drawn[0] != own[0]).reshape(-1).nonzero().reshape(-1)
    assert changed.numel() == models.SPARSE_ELEMENTS
    # the element is the stress set's own at that place: the inputs stay in the audited domain
    assert torch.equal(drawn[0].reshape(-1)[changed], stress[0].reshape(-1)[changed])
    count = own[0].numel()
    for index in changed.tolist():
        assert index % models.SPARSE_STRIDE != 0
        assert count // models.SPARSE_MARGIN <= index < count - count // models.SPARSE_MARGIN
    # torch.rand draws no negative value; the one stress element is negative, and clearly so
    assert float(drawn[0].reshape(-1)[changed].max()) < -0.05 and float(own[0].min()) >= 0


def test_sparse_sets_differ_from_seed_to_seed_and_take_their_elements_from_their_stress_distribution():
    places = set()
    for seed in range(40):
        own = models.generate_inputs(Task, seed, 1.0, "cpu")[0].reshape(-1)
        drawn = models.generate_inputs(Task, seed, 1.0, "cpu", sparse())[0].reshape(-1)
        places.update((drawn != own).nonzero().reshape(-1).tolist())
        assert float(drawn.min()) < 0
    assert len(places) >= 38, "positions drawn from the seed"
    shifted = {"kind": "shifted", "positive": True}
    own = models.generate_inputs(Task, 5, 1.0, "cpu")[0]
    moved = models.generate_inputs(Task, 5, 1.0, "cpu", sparse(shifted))[0]
    changed = (moved != own).reshape(-1).nonzero().reshape(-1)
    assert changed.numel() == 1
    # no sign to flip: the element farthest from the task's own value, outside its range
    assert float(moved.reshape(-1)[changed]) > float(own.max()) + 1


def test_a_sparse_set_catches_a_shortcut_taken_on_a_sample_that_stress_sets_make_compute():
    # ReLU of torch.rand inputs, as a kernel that tests a sample for negative values and copies
    # its input when the sample has none.
    def stride(flat):
        return flat[::64]

    def prefix(flat):
        return flat[:1024]

    scattered_positions = torch.randperm(64 * 256, generator=torch.Generator().manual_seed(3))[:256]

    def scattered(flat):
        return flat[scattered_positions]

    def shortcut(sample):
        def relu(x):
            return x.clone() if bool((sample(x.reshape(-1)) >= 0).all()) else torch.relu(x)
        return relu

    for sample in (stride, prefix, scattered):
        relu = shortcut(sample)
        for seed in range(6):
            own = models.generate_inputs(Task, seed, 1.0, "cpu")[0]
            assert torch.equal(relu(own), torch.relu(own)), "right on the task's own inputs"
            stressed = models.generate_inputs(Task, seed, 1.0, "cpu", SIGN_SYMMETRIC)[0]
            assert torch.equal(relu(stressed), torch.relu(stressed)), "it computes where its sample sees negatives"
        caught = 0
        for seed in range(64):
            x = models.generate_inputs(Task, seed, 1.0, "cpu", sparse())[0]
            caught += not torch.allclose(relu(x), torch.relu(x), atol=1e-2, rtol=1e-2)
        # strided and prefix samples never see the element; a random one of a 64th does, at times
        assert caught == 64 if sample is not scattered else caught >= 56


def test_sparse_sets_are_checked_and_described():
    assert models.check_distribution({"kind": "sparse", "stress": {"kind": "heavy_tailed"}}) == \
        {"kind": "sparse", "stress": {"kind": "heavy_tailed", "positive": False}}
    for stress in (None, {"kind": "gaussian"}, sparse(), {"kind": models.NEAR_REPEAT, "base": [1, 1.0, None]}):
        with pytest.raises(models.DistributionError):
            models.check_distribution({"kind": "sparse", "stress": stress})
    text = models.describe_distribution(models.check_distribution(sparse()))
    assert "own inputs" in text and "sign-symmetric stress inputs" in text


def test_a_sparse_set_of_a_tiny_input_is_its_stress_set():
    class Tiny:
        @staticmethod
        def get_inputs():
            return [torch.rand(1), torch.rand(3, 5)]

    own = models.generate_inputs(Tiny, 8, 1.0, "cpu")
    drawn = models.generate_inputs(Tiny, 8, 1.0, "cpu", sparse())
    stress = models.generate_inputs(Tiny, 8, 1.0, "cpu", SIGN_SYMMETRIC)
    assert torch.equal(drawn[0], stress[0])
    assert int((drawn[1] != own[1]).sum()) == 1, "small inputs draw from every position"


REFERENCE = """
import torch
import torch.nn as nn

batch, width = 4, 32
SCALE = 0.5


def helper(n):
    return torch.rand(batch, n) * SCALE


class Model(nn.Module):
    def __init__(self, k):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def unrelated():
    return Model(3)


def get_inputs():
    return [helper(width), [torch.randn(2) for _ in range(2)], 3.0]


def get_init_inputs():
    return [batch]
"""


def test_the_reference_module_keeps_only_what_builds_inputs(tmp_path):
    import sys

    path = tmp_path / "model.py"
    path.write_text(REFERENCE)
    module = models.load_reference(str(path))
    before = models.generate_inputs(module, 17, 1.0, "cpu", sparse())
    init = models.init_inputs(module, 17, "cpu")
    assert sys.modules.get("cuda_agent_reference") is module
    models.keep_inputs_only(module)
    assert not hasattr(module, "Model") and not hasattr(module, "unrelated") and not hasattr(module, "nn")
    assert {"get_inputs", "get_init_inputs", "helper", "batch", "width", "SCALE", "torch"} <= set(vars(module))
    assert "Model" not in module.get_inputs.__globals__
    assert module not in sys.modules.values()
    after = models.generate_inputs(module, 17, 1.0, "cpu", sparse())
    assert torch.equal(before[0], after[0]) and all(torch.equal(a, b) for a, b in zip(before[1], after[1]))
    assert before[2] == after[2] and models.init_inputs(module, 17, "cpu") == init
    assert models.fingerprint(before[:1]) == models.fingerprint(after[:1])


def test_a_flat_set_is_the_task_s_own_inputs_with_a_sample_and_a_channel_of_zeros():
    own = models.generate_inputs(Task, 5, 1.0, "cpu")
    flat = models.generate_inputs(Task, 5, 1.0, "cpu", {"kind": models.FLAT})
    assert torch.equal(flat[0], models.generate_inputs(Task, 5, 1.0, "cpu", {"kind": models.FLAT})[0])
    assert torch.equal(flat[1], own[1]) and flat[2] == own[2], "integers and numbers as in the task's own set"
    value = flat[0]
    zero_samples = [i for i in range(value.shape[0]) if bool((value[i] == 0).all())]
    zero_channels = [j for j in range(value.shape[1]) if bool((value[:, j] == 0).all())]
    assert len(zero_samples) == 1 and len(zero_channels) == 1 and float(own[0].min()) > 0
    changed = value != own[0]
    changed[zero_samples[0]] = False
    changed[:, zero_channels[0]] = False
    assert not bool(changed.any()), "the rest is the task's own draw"
    places = {tuple((models.generate_inputs(Task, seed, 1.0, "cpu", {"kind": models.FLAT})[0] == 0)
                    .all(dim=1).nonzero().reshape(-1).tolist()) for seed in range(6, 12)}
    assert len(places) > 1, "the zero sample is drawn per seed"
    assert models.describe_distribution({"kind": models.FLAT}).startswith("the task's own inputs")


def test_a_flat_set_exposes_layer_and_rms_norms_without_their_epsilon():
    x = models.flat_inputs(torch.rand(4, 8, 32), 3, 0)

    def without_epsilon(v):
        mean = v.mean(dim=(1, 2), keepdim=True)
        variance = (v * v).mean(dim=(1, 2), keepdim=True) - mean * mean
        return (v - mean) / variance.sqrt()

    def rms_norm_without_epsilon(v):
        return v / v.square().mean(dim=1, keepdim=True).sqrt()

    assert torch.isfinite(torch.nn.functional.layer_norm(x, x.shape[1:])).all()
    assert torch.isfinite(x / (x.square().mean(dim=1, keepdim=True) + 1e-5).sqrt()).all()
    assert not torch.isfinite(without_epsilon(x)).all()
    assert not torch.isfinite(rms_norm_without_epsilon(x)).all()
    assert torch.isfinite(without_epsilon(torch.rand(4, 8, 32))).all(), "the task's own inputs do not show it"


def test_a_negated_set_is_the_task_s_own_inputs_with_its_numbers_negated():
    own = models.generate_inputs(Task, 8, 1.0, "cpu")
    negated = models.generate_inputs(Task, 8, 1.0, "cpu", {"kind": models.NEGATED_SCALARS})
    assert torch.equal(negated[0], own[0]) and torch.equal(negated[1], own[1])
    assert negated[2] == -own[2] and own[2] > 0
    assert "negated" in models.describe_distribution({"kind": models.NEGATED_SCALARS})


def test_a_shifted_set_is_the_task_s_own_inputs_with_every_integer_one_larger():
    class WithIntegers:
        @staticmethod
        def get_inputs():
            return [torch.rand(8, 16), 3, True, torch.randint(0, 10, (8,))]

    own = models.generate_inputs(WithIntegers, 5, 1.0, "cpu")
    shifted = models.generate_inputs(WithIntegers, 5, 1.0, "cpu", {"kind": models.SHIFTED_INTEGERS})
    assert torch.equal(shifted[0], own[0]) and torch.equal(shifted[3], own[3])
    assert shifted[1] == 4 and own[1] == 3 and shifted[2] is True, "a boolean is a flag, not an integer"
    assert "one larger" in models.describe_distribution({"kind": models.SHIFTED_INTEGERS})


def test_a_dense_sentinel_set_holds_the_value_in_all_but_two_elements():
    spec = {"kind": models.INTEGER_SENTINELS, "value": -100, "dense": True}
    own = models.generate_inputs(Task, 8, 1.0, "cpu")
    first = models.generate_inputs(Task, 8, 1.0, "cpu", spec)
    assert torch.equal(first[1], models.generate_inputs(Task, 8, 1.0, "cpu", spec)[1])
    kept = first[1] != -100
    assert int(kept.sum()) == models.DENSE_SENTINEL_KEPT
    assert torch.equal(first[1][kept], own[1][kept])
    assert models.check_distribution(spec) == spec
    assert "but 2" in models.describe_distribution(spec)


def test_a_milder_heavy_tail_holds_every_element_within_its_spike():
    value = torch.randn(64, 4096)
    scale = float(value.square().mean().sqrt())
    spec = models.check_distribution({"kind": "heavy_tailed", "positive": False, "spike": 8})
    mild = models.reshape_distribution(value, spec, 5, 0)
    full = models.reshape_distribution(value, models.check_distribution({"kind": "heavy_tailed"}), 5, 0)
    # The clamp is before the per-index offsets (trailing zero bits, 12 at most here).
    assert float(mild.abs().max()) <= (8 + 13) * scale
    assert float(full.abs().max()) >= 1000 * scale
    assert float(mild.abs().max()) >= 7.9 * scale, "the spikes are still there, at the milder size"
    for spike in (0.5, 2048, "8", True):
        with pytest.raises(models.DistributionError, match="spike"):
            models.check_distribution({"kind": "heavy_tailed", "spike": spike})


def test_a_sentinel_set_holds_the_value_in_one_element_in_sixteen_of_each_integer_tensor():
    spec = {"kind": models.INTEGER_SENTINELS, "value": -100}
    own = models.generate_inputs(Task, 8, 1.0, "cpu")
    first = models.generate_inputs(Task, 8, 1.0, "cpu", spec)
    again = models.generate_inputs(Task, 8, 1.0, "cpu", spec)
    assert torch.equal(first[1], again[1]), "reproducible from the seed"
    assert torch.equal(first[0], own[0]) and first[2] == own[2]
    sentinels = int((first[1] == -100).sum())
    assert 1 <= sentinels <= 64 // models.SENTINEL_ELEMENTS
    assert torch.equal(first[1][first[1] != -100], own[1][first[1] != -100])
    assert models.check_distribution(spec) == spec
    with pytest.raises(models.DistributionError, match="integer"):
        models.check_distribution({"kind": models.INTEGER_SENTINELS, "value": 1.5})

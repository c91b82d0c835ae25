# SPDX-License-Identifier: Apache-2.0
"""The verification's last call, on Model and ModelNew constructed with other floating-point
constructor arguments: a kernel that hard-codes such a number (a divisor of 2.0 written as
``* 0.5``) is right for get_init_inputs() alone, since every input set is computed by models
built from the same arguments. Each number gets a factor of its own (their ratios change,
their order stays). Integers (sizes) never change; a reference whose output does
not depend on its numbers gets no such call."""

import math

import pytest
import torch

from cuda_agent_harness import models
from cuda_agent_harness.checks import compare
from cuda_agent_harness.verify import reference

import verification_support as support

#: relu(x * scale) / divisor: a weight whose shape is the integer argument, and a divisor.
DIVIDE_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int, divisor: float):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.divisor = divisor

    def forward(self, x):
        return torch.relu(x * self.scale) / self.divisor


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return [64, 2.0]
"""

EXTENSION = support.EXTENSION + """

def scaled_relu(x, scale, factor):
    return torch.relu(x * scale) * factor
"""

#: ModelNew's constructor refuses any other size: the integer argument must stay what it is.
MODEL_NEW = """
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, features, divisor):
        super().__init__()
        if type(features) is not int or features != 64:
            raise ValueError(f"features changed: {features!r}")
        self.scale = nn.Parameter(torch.empty(features))
        INIT

    def forward(self, x):
        return cuda_extension.scaled_relu(x, self.scale, FACTOR)
"""


def model_new(init: str, factor: str) -> str:
    return MODEL_NEW.replace("INIT", init).replace("FACTOR", factor)


HARD_CODED = model_new("self.divisor = divisor", "0.5")


def test_a_kernel_that_hard_codes_a_float_constructor_argument_is_rejected_and_told_which(tmp_path):
    result, report = support.verify(tmp_path, task=DIVIDE_TASK, model_new=HARD_CODED, extension=EXTENSION, sets=2)
    verdict = result["verdict"]
    assert not verdict["correct"] and verdict["reason"] == "value_mismatch", verdict
    message = verdict["message"]
    assert "get_init_inputs()[1] (divisor) = " in message and "instead of 2.0" in message, message
    assert "constructor receives" in message and "index" in message, message
    [change] = verdict["details"]["constants"]
    low, high = models.CONSTANT_FACTOR_RANGE
    assert change["position"] == 1 and change["name"] == "divisor" and change["original"] == 2.0
    assert 2.0 * low <= change["changed"] <= 2.0 * high
    assert f"{change['changed']!r}" in message
    # Every call of the plan matched: only the last one, on the changed arguments, did not.
    assert len(result["checks"]) == result["planned_calls"] - 1
    assert result["plan"][-1]["constants"] == verdict["details"]["constants"]
    assert report["status"] == "stopped"


@pytest.mark.parametrize("init, factor", [
    ("self.divisor = divisor", "1.0 / self.divisor"),  # kept as given, its reciprocal taken per call
    ("self.inverse = 1.0 / divisor", "self.inverse"),  # the reciprocal computed once on the host
])
def test_a_kernel_that_uses_the_argument_passes_the_call_on_changed_arguments(tmp_path, init, factor):
    result, report = support.verify(tmp_path, task=DIVIDE_TASK, model_new=model_new(init, factor),
                                    extension=EXTENSION, sets=2)
    assert result["verdict"]["correct"], result["verdict"]
    assert len(result["checks"]) == result["planned_calls"] == report["observations"]["checks"]
    last = result["checks"][-1]
    assert [change["position"] for change in last["constants"]] == [1], "the integer size never changes"
    assert last["call"] == result["planned_calls"] and last["set"] == 0


def test_weights_that_the_number_initializes_are_those_of_the_reference_built_with_it(tmp_path):
    # The gain starts from the number: the second ModelNew must get the second reference's
    # weights, or a candidate that reads them would fail.
    task = DIVIDE_TASK.replace("torch.randn(features)", "torch.full((features,), 1.0 + divisor)")
    result, _ = support.verify(tmp_path, task=task, model_new=model_new("self.divisor = divisor", "1.0 / self.divisor"),
                               extension=EXTENSION, sets=2)
    assert result["verdict"]["correct"], result["verdict"]
    assert "constants" in result["checks"][-1]
    module = _module(tmp_path, task)
    model, arguments = models.build_reference_model(module, 3, "cpu", "eval", True)
    built, changed, _ = models.build_with_changed_constants(module, 3, "cpu", "eval", True, None, arguments,
                                                            model.state_dict())
    assert not torch.equal(built.scale, model.scale) and changed[0] == 64


def test_a_reference_that_ignores_its_float_argument_gets_no_such_call(tmp_path):
    # The same candidate, which leaves the divisor out: right for a reference that does too,
    # and only the call on changed arguments tells it from one that divides by 1.0.
    ignoring = DIVIDE_TASK.replace("torch.relu(x * self.scale) / self.divisor", "torch.relu(x * self.scale)")
    candidate = HARD_CODED.replace("0.5", "1.0")
    result, report = support.verify(tmp_path / "ignores", task=ignoring, model_new=candidate, extension=EXTENSION,
                                    sets=2)
    assert result["verdict"]["correct"], result["verdict"]
    assert not any("constants" in step for step in result["plan"])
    assert len(result["checks"]) == result["planned_calls"] == report["observations"]["checks"]
    divides = DIVIDE_TASK.replace("[64, 2.0]", "[64, 1.0]")
    result, _ = support.verify(tmp_path / "divides", task=divides, model_new=candidate, extension=EXTENSION, sets=2)
    assert result["verdict"]["reason"] == "value_mismatch" and "instead of 1.0" in result["verdict"]["message"]


def test_only_finite_nonzero_floats_change_each_by_a_factor_of_its_own_that_keeps_signs_and_order():
    arguments = [64, 2.0, True, "mean", (3, 0.5), 0.0, math.inf, -1.5, 1e-5]
    changed, changes = models.changed_constants(arguments, 11)
    assert [change["position"] for change in changes] == [1, 7, 8]
    for position in (0, 2, 3, 4, 5, 6):
        assert changed[position] is arguments[position] or changed[position] == arguments[position]
    assert type(changed[0]) is int and changed[2] is True
    factors = [changed[p] / arguments[p] for p in (1, 7, 8)]
    low, high = models.CONSTANT_FACTOR_RANGE
    assert all(low <= factor <= high for factor in factors) and changed[7] < 0
    assert len({round(factor, 12) for factor in factors}) == 3, "ratios between the numbers change too"
    assert models.changed_constants(arguments, 11) == (changed, changes), "the init seed reproduces it"
    assert len({models.changed_constants(arguments, seed)[0][1] for seed in range(20)}) == 20
    assert models.changed_constants([64, 3, False], 11)[1] == []


def test_close_numbers_keep_their_order_under_every_seed():
    # A lower and an upper bound 5% apart: factors of their own would often swap them.
    arguments = [0.95, 1.0, -1.0, -0.97]
    for seed in range(200):
        changed, _ = models.changed_constants(arguments, seed)
        assert changed[0] < changed[1] and changed[3] > changed[2], (seed, changed)
        assert changed[0] > 0 and changed[2] < 0


#: HardTanh with its two bounds as constructor arguments (symmetric in get_init_inputs()).
BOUNDS_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, min_val: float, max_val: float):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x):
        return torch.clamp(x, self.min_val, self.max_val)


def get_inputs():
    return [torch.randn(8, 64) * 2]


def get_init_inputs():
    return [-1.0, 1.0]
"""

BOUNDS_EXTENSION = support.EXTENSION + """

def clamp(x, low, high):
    return torch.clamp(x, low, high)
"""

BOUNDS_MODEL_NEW = """
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, min_val, max_val):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x):
        return cuda_extension.clamp(x, LOW, self.max_val)
"""


@pytest.mark.parametrize("low, correct", [("self.min_val", True), ("-self.max_val", False)])
def test_a_kernel_that_derives_one_bound_from_the_other_is_rejected(tmp_path, low, correct):
    result, _ = support.verify(tmp_path, task=BOUNDS_TASK, model_new=BOUNDS_MODEL_NEW.replace("LOW", low),
                               extension=BOUNDS_EXTENSION, sets=2)
    verdict = result["verdict"]
    assert verdict["correct"] is correct, verdict
    if not correct:
        assert verdict["reason"] == "value_mismatch" and "get_init_inputs()[0] (min_val) = " in verdict["message"]


def _module(tmp_path, task: str):
    path = tmp_path / "constants_task.py"
    path.write_text(task)
    return models.load_reference(str(path))


def _pass(tmp_path, task: str):
    """The reference side's call on changed arguments for ``task``, or None."""
    module = _module(tmp_path, task)
    args = {"init_seed": 5, "seeds": [9], "tolerance": compare.PAPER}
    model, arguments = models.build_reference_model(module, 5, "cpu", "eval", True)
    specs = reference.set_specs(args)
    expected = reference.run_reference_sets(module, model, args, "cpu", specs)
    return reference.constants_pass(module, args, "cpu", arguments, model.state_dict(), specs[0], expected[0])


@pytest.mark.parametrize("case, task", [
    ("an epsilon below the tolerance",
     DIVIDE_TASK.replace("/ self.divisor", "+ self.divisor").replace("[64, 2.0]", "[64, 1e-7]")),
    ("a number that sizes a weight",
     DIVIDE_TASK.replace("torch.randn(features)", "torch.randn(int(features * divisor))")
     .replace("x * self.scale", "x * self.scale[:64]")),
    ("a number that sizes the output",
     DIVIDE_TASK.replace("torch.relu(x * self.scale) / self.divisor",
                         "torch.relu(x * self.scale)[:, :int(32 * self.divisor)]")),
    ("a Model that refuses other values",
     DIVIDE_TASK.replace("self.divisor = divisor", "assert divisor == 2.0\n        self.divisor = divisor")),
    ("a Model that fails on them",
     DIVIDE_TASK.replace("/ self.divisor", "/ math.sqrt(self.divisor - 1.9)")
     .replace("import torch\n", "import math\nimport torch\n", 1)),
    ("a Model whose outputs are no longer finite on them",
     DIVIDE_TASK.replace("/ self.divisor", "* torch.tensor(self.divisor - 1.9).sqrt()")),
])
def test_no_call_where_the_numbers_cannot_tell_anything(tmp_path, case, task):
    assert _pass(tmp_path, task) is None, case


def test_the_call_names_every_changed_argument(tmp_path):
    task = DIVIDE_TASK.replace("def __init__(self, features: int, divisor: float):",
                               "def __init__(self, features: int, divisor: float, eps: float):") \
        .replace("[64, 2.0]", "[64, 2.0, 1e-5]")
    found = _pass(tmp_path, task)
    assert [(change["position"], change["name"]) for change in found.changes] == [(1, "divisor"), (2, "eps")]
    assert found.describe().startswith("get_init_inputs()[1] (divisor) = ")

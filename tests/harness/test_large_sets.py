# SPDX-License-Identifier: Apache-2.0
"""Tasks whose input sets and outputs take gigabytes: the evaluator's own copies must leave
the device to the candidate. Expected outputs move to host memory and are compared on the
device a chunk at a time; snapshots of large outputs go to the host; bit comparisons work
a chunk at a time, across devices."""

import pytest
import torch

from cuda_agent_harness import models
from cuda_agent_harness.checks import compare, hygiene
from cuda_agent_harness.checks.compare import Failure
from cuda_agent_harness.verify import reference

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: host copies of device values")

SCALE_TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 3.0 - 1.0


def get_inputs():
    return [torch.randn(64, 1000)]


def get_init_inputs():
    return []
"""


def test_same_bits_finds_a_difference_in_the_last_chunk(monkeypatch):
    monkeypatch.setattr(hygiene, "COMPARE_CHUNK", 4)
    a = torch.arange(10, dtype=torch.float32)
    b = a.clone()
    assert hygiene.same_bits(a, b)
    b[9] = -1.0
    assert not hygiene.same_bits(a, b)


def test_same_bits_takes_nan_as_equal_and_other_shapes_as_different(monkeypatch):
    monkeypatch.setattr(hygiene, "COMPARE_CHUNK", 3)
    a = torch.tensor([1.0, float("nan"), 2.0, float("nan")])
    assert hygiene.same_bits(a, a.clone())
    assert not hygiene.same_bits(a, torch.tensor([1.0, 0.0, 2.0, float("nan")]))
    assert not hygiene.same_bits(a, a.clone().view(2, 2))
    # Integers compare exactly, views that are not contiguous as a whole.
    x = torch.arange(12).view(3, 4)
    assert hygiene.same_bits(x.t(), x.clone().t())
    y = x.clone()
    y[2, 3] = 0
    assert not hygiene.same_bits(x.t(), y.t())


def test_large_outputs_are_snapshot_in_host_memory(monkeypatch):
    monkeypatch.setattr(hygiene, "SNAPSHOT_DEVICE_BYTES", 64)
    small, large = torch.ones(4), torch.arange(100, dtype=torch.float32)
    # Together they pass the limit: both copies go to the host, each a copy of its own.
    copies = hygiene.snapshot_outputs([small, large])
    assert [copy.device.type for copy in copies] == ["cpu", "cpu"]
    assert all(copy.data_ptr() != original.data_ptr() for copy, original in zip(copies, [small, large]))
    large[5] = -1.0
    assert not hygiene.same_bits(copies[1], large), "a snapshot is a copy, not a view"


def test_on_the_cpu_expected_outputs_stay_where_they_are(tmp_path):
    module, model, args = _reference(tmp_path)
    expected = reference.run_reference_sets(module, model, args, "cpu")
    assert not any(entry.on_host() for entry in expected)
    assert reference.footprint(model.state_dict(), expected, "cpu")["expected_on_host"] is False


def _reference(tmp_path, device="cpu"):
    path = tmp_path / "scale_task.py"
    path.write_text(SCALE_TASK)
    module = models.load_reference(str(path))
    model, _ = models.build_reference_model(module, 5, device, "eval", True)
    return module, model, {"init_seed": 5, "seeds": [9, 10, 11], "tolerance": compare.PAPER}


@cuda
def test_expected_outputs_over_the_device_share_are_kept_on_the_host_and_compared_on_the_device(tmp_path,
                                                                                                monkeypatch):
    monkeypatch.setattr(reference, "EXPECTED_DEVICE_SHARE", 0.0)
    module, model, args = _reference(tmp_path, "cuda")
    expected = reference.run_reference_sets(module, model, args, "cuda")
    assert all(entry.on_host() and entry.compute_device.type == "cuda" for entry in expected)
    assert all(not tensor.is_cuda for entry in expected for tensor in entry.tensors)
    shown = reference.footprint(model.state_dict(), expected, "cuda", 0)
    assert shown["expected_on_host"] is True and shown["device_total_bytes"] > 0
    inputs = models.generate_inputs(module, 9, 1.0, "cuda")
    right = inputs[0] * 3.0 - 1.0
    assert expected[0].mismatch(right) is None
    wrong = right.clone()
    wrong[63, 999] += 1.0
    failure = expected[0].mismatch(wrong)
    assert isinstance(failure, Failure) and failure.reason == "value_mismatch"
    assert failure.details["index"] == [63, 999]


@cuda
def test_expected_outputs_within_the_share_stay_on_the_device(tmp_path):
    module, model, args = _reference(tmp_path, "cuda")
    expected = reference.run_reference_sets(module, model, args, "cuda")
    assert all(tensor.is_cuda for entry in expected for tensor in entry.tensors)
    assert not any(entry.on_host() for entry in expected)


@cuda
def test_bits_compare_across_devices_and_snapshots_of_device_outputs_go_to_the_host(monkeypatch):
    monkeypatch.setattr(hygiene, "COMPARE_CHUNK", 1000)
    on_device = torch.randn(4096, device="cuda")
    copy = hygiene.snapshot_outputs([on_device], host=True)[0]
    assert copy.device.type == "cpu" and hygiene.same_bits(copy, on_device) and hygiene.same_bits(on_device, copy)
    on_device[4095] += 1.0
    assert not hygiene.same_bits(copy, on_device)

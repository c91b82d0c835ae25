# SPDX-License-Identifier: Apache-2.0
"""Outputs as raw bytes, and their comparison with the reference: what passes, what fails,
and what the messages say."""

import math
import os

import pytest
import torch

from cuda_agent_harness.checks import compare
from cuda_agent_harness import tensorio
from cuda_agent_harness.checks.compare import Failure


def roundtrip(tmp_path, value):
    layout = []
    description = tensorio.describe(value, layout)
    path = str(tmp_path / "slot")
    tensorio.write_slot(path, layout)
    tensorio.validate(description)
    return description, path


def test_tensors_survive_the_slot_bit_for_bit(tmp_path):
    values = (torch.randn(3, 5), torch.arange(7, dtype=torch.int64), torch.randn(4, 4).t(),
              torch.tensor([True, False]), torch.randn(2, dtype=torch.bfloat16), torch.tensor(3.5))
    description, path = roundtrip(tmp_path, values)
    assert description["kind"] == "sequence" and description["type"] == "tuple"
    for item, value in zip(description["items"], values):
        assert item["offset"] % tensorio.ALIGNMENT == 0
        read = tensorio.read_tensor(path, item)
        assert read.dtype == value.dtype and read.shape == value.shape
        assert torch.equal(read, value)


def test_staged_writes_keep_the_bytes_in_order_across_pieces(tmp_path):
    value = torch.randint(0, 256, (1000,), dtype=torch.uint8)
    staging = tensorio.ScratchBuffer(pinned_limit=48)  # pieces of 48 bytes, the last one short
    path = tmp_path / "slot"
    path.write_bytes(b"\xab" * 1100)
    fd = os.open(path, os.O_RDWR)
    try:
        tensorio.write_through_staging(fd, 64, value, staging)
    finally:
        os.close(fd)
    data = path.read_bytes()
    assert data[:64] == b"\xab" * 64 and data[1064:] == b"\xab" * 36, "nothing outside the region is touched"
    assert data[64:1064] == bytes(value.tolist())
    assert staging.buffer.numel() <= 48


def test_a_slot_is_rewritten_in_place_and_shrinks_to_its_new_size(tmp_path):
    first, second = torch.randn(1000), torch.arange(10, dtype=torch.int32)
    description, path = roundtrip(tmp_path, first)
    inode = os.stat(path).st_ino
    layout = []
    described = tensorio.describe(second, layout)
    tensorio.write_slot(path, layout)
    assert os.stat(path).st_ino == inode and os.path.getsize(path) == 64
    assert torch.equal(tensorio.read_tensor(path, described), second)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: staging is for outputs on a GPU")
@pytest.mark.parametrize("pinned_limit", [256 << 20, 1 << 20], ids=["one piece", "many pieces"])
def test_on_cuda_outputs_pass_through_page_locked_staging(tmp_path, pinned_limit):
    values = (torch.randn(1024, 1031, device="cuda"), torch.randn(64, 3, device="cuda").t(),
              torch.arange(5, device="cuda"), torch.randn(3))
    layout = []
    description = tensorio.describe(values, layout)
    staging = tensorio.ScratchBuffer(pinned=True, pinned_limit=pinned_limit)
    tensorio.write_slot(str(tmp_path / "slot"), layout, staging)
    assert staging.buffer.is_pinned() and staging.buffer.numel() <= pinned_limit
    for item, value in zip(description["items"], values):
        assert torch.equal(tensorio.read_tensor(str(tmp_path / "slot"), item), value.cpu())


def test_subclasses_scalars_and_other_objects_are_described_not_read(tmp_path):
    class Lazy(torch.Tensor):
        pass

    description, _ = roundtrip(tmp_path, [torch.ones(2).as_subclass(Lazy), 3, 2.5, None, "text"])
    kinds = [(item["kind"], item["type"]) for item in description["items"]]
    assert kinds[0][0] == "other" and kinds[0][1].endswith("Lazy")
    assert kinds[1:4] == [("scalar", "int"), ("scalar", "float"), ("scalar", "NoneType")]
    assert kinds[4] == ("other", "str")


def test_per_instance_overrides_are_reported(tmp_path):
    tensor = torch.zeros(2)
    tensor.cpu = lambda: torch.ones(2)
    description, _ = roundtrip(tmp_path, tensor)
    assert description["overrides"] == ["cpu"]


@pytest.mark.parametrize("broken", [
    {"kind": "tensor", "type": "torch.Tensor", "dtype": "float32", "shape": [2, 2], "offset": 0, "nbytes": 12},
    {"kind": "tensor", "type": "torch.Tensor", "dtype": "float32", "shape": [-1], "offset": 0, "nbytes": 0},
    {"kind": "tensor", "type": "torch.Tensor", "dtype": "object", "shape": [1], "offset": 0, "nbytes": 8},
    {"kind": "tensor", "type": "torch.Tensor", "dtype": "float32", "shape": [1], "offset": 3, "nbytes": 4},
    {"kind": "sequence", "type": "tuple"},
    {"kind": "scalar", "type": "complex", "value": 1},
    {"kind": "mystery", "type": "x"},
    "not an object",
])
def test_malformed_descriptions_are_refused(broken):
    with pytest.raises(tensorio.DescriptionError):
        tensorio.validate(broken)


def test_deep_or_huge_descriptions_are_refused():
    deep = {"kind": "scalar", "type": "int", "value": 0}
    for _ in range(tensorio.MAX_DEPTH + 2):
        deep = {"kind": "sequence", "type": "list", "items": [deep]}
    with pytest.raises(tensorio.DescriptionError):
        tensorio.validate(deep)
    wide = {"kind": "sequence", "type": "list", "items": [{"kind": "scalar", "type": "int", "value": 0}] * (tensorio.MAX_LEAVES + 1)}
    with pytest.raises(tensorio.DescriptionError):
        tensorio.validate(wide)


def test_a_slot_rewritten_in_place_holds_only_the_new_output(tmp_path):
    large, path = roundtrip(tmp_path, torch.randn(4096))
    small_value = torch.arange(10, dtype=torch.float32)
    layout = []
    small = tensorio.describe(small_value, layout)
    tensorio.write_slot(path, layout)
    assert os.path.getsize(path) == tensorio.ALIGNMENT  # no tail of the larger output is left
    assert torch.equal(tensorio.read_tensor(path, small), small_value)
    with pytest.raises(tensorio.DescriptionError):  # the larger description no longer fits
        tensorio.read_tensor(path, large)


def test_reads_into_a_scratch_buffer_reuse_it_and_grow_it(tmp_path):
    folders = [tmp_path / name for name in ("a", "b", "c")]
    for folder in folders:
        folder.mkdir()
    first_value, second_value, grown_value = torch.randn(100), torch.randn(50, dtype=torch.float64), torch.randn(1000)
    (first, first_path), (second, second_path), (grown, grown_path) = (
        roundtrip(folder, value) for folder, value in zip(folders, (first_value, second_value, grown_value)))
    scratch = tensorio.ScratchBuffer()
    assert torch.equal(tensorio.read_tensor(first_path, first, scratch), first_value)
    held = scratch.buffer
    assert torch.equal(tensorio.read_tensor(second_path, second, scratch), second_value)
    assert scratch.buffer is held  # 400 bytes, then 400 bytes: the same memory
    assert torch.equal(tensorio.read_tensor(grown_path, grown, scratch), grown_value)
    assert scratch.buffer.numel() >= 4000
    os.truncate(grown_path, 100)
    with pytest.raises(tensorio.DescriptionError):
        tensorio.read_tensor(grown_path, grown, scratch)


def test_a_truncated_slot_is_an_error_not_a_crash(tmp_path):
    description, path = roundtrip(tmp_path, torch.randn(1024))
    os.truncate(path, 100)
    with pytest.raises(tensorio.DescriptionError):
        tensorio.read_tensor(path, description)


def describe(value):
    return tensorio.describe(value, [])


def test_structure_type_shape_dtype_and_device_are_checked_in_that_order():
    expected = describe(torch.zeros(2, 3))
    with pytest.raises(Failure) as failure:
        compare.compare_structure(expected, describe((torch.zeros(2, 3),)))
    assert failure.value.reason == "output_structure"
    with pytest.raises(Failure) as failure:
        compare.compare_structure(expected, describe(torch.zeros(3, 2)))
    assert failure.value.reason == "shape_mismatch" and "(3, 2)" in failure.value.message
    with pytest.raises(Failure) as failure:
        compare.compare_structure(expected, describe(torch.zeros(2, 3, dtype=torch.float64)))
    assert failure.value.reason == "dtype_mismatch"
    fake_cuda = dict(describe(torch.zeros(2, 3)), device="cuda:0")
    with pytest.raises(Failure) as failure:
        compare.compare_structure(expected, fake_cuda)
    assert failure.value.reason == "device_mismatch"
    with pytest.raises(Failure) as failure:
        compare.compare_structure(describe((torch.zeros(1), torch.zeros(1))), describe([torch.zeros(1), torch.zeros(1)]))
    assert failure.value.reason == "output_type"
    compare.compare_structure(expected, describe(torch.zeros(2, 3)))


def test_the_first_mismatch_is_reported_with_index_expected_and_actual():
    expected = torch.zeros(4, 5)
    actual = expected.clone()
    actual[2, 3] = 0.5
    actual[3, 1] = 2.0
    with pytest.raises(Failure) as failure:
        compare.compare_tensor(expected, actual, {"atol": 1e-2, "rtol": 1e-2}, "the output")
    assert failure.value.reason == "value_mismatch"
    message = failure.value.message
    assert "index (2, 3)" in message and "expected 0" in message and "got 0.5" in message
    assert "2 of 20 elements" in message and "largest difference is 2 at index (3, 1)" in message
    assert failure.value.details["index"] == [2, 3]


def test_tolerance_is_absolute_plus_relative():
    expected = torch.tensor([100.0, 0.0])
    compare.compare_tensor(expected, torch.tensor([100.9, 0.009]), {"atol": 1e-2, "rtol": 1e-2}, "x")
    with pytest.raises(Failure):
        compare.compare_tensor(expected, torch.tensor([101.2, 0.0]), {"atol": 1e-2, "rtol": 1e-2}, "x")
    with pytest.raises(Failure):
        compare.compare_tensor(expected, torch.tensor([100.0, 0.009]), {"atol": 1e-4, "rtol": 1e-4}, "x")


def test_non_finite_values_fail_only_where_the_reference_is_finite():
    expected = torch.tensor([1.0, float("nan"), float("inf")])
    compare.compare_tensor(expected, torch.tensor([1.0, float("nan"), float("inf")]), {"atol": 1e-2, "rtol": 1e-2}, "x")
    with pytest.raises(Failure) as failure:
        compare.compare_tensor(expected, torch.tensor([float("nan"), float("nan"), float("inf")]),
                               {"atol": 1e-2, "rtol": 1e-2}, "x")
    assert failure.value.reason == "non_finite"
    with pytest.raises(Failure) as failure:
        compare.compare_tensor(expected, torch.tensor([1.0, 2.0, float("inf")]), {"atol": 1e-2, "rtol": 1e-2}, "x")
    assert failure.value.reason == "value_mismatch"


def test_poisoned_memory_is_named_as_such():
    expected = torch.zeros(8)
    poisoned = torch.empty(8).view(torch.uint8).fill_(compare.POISON_BYTE).view(torch.float32)
    with pytest.raises(Failure) as failure:
        compare.compare_tensor(expected, poisoned, {"atol": 1e-2, "rtol": 1e-2}, "the output")
    assert failure.value.reason == "non_finite" and "never written" in failure.value.message


def test_integers_compare_exactly():
    with pytest.raises(Failure) as failure:
        compare.compare_tensor(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]), {"atol": 10.0, "rtol": 10.0}, "x")
    assert "index (2)" in failure.value.message


def test_tolerance_profiles():
    assert compare.tolerance_for(compare.PAPER, torch.float32) == {"atol": 1e-2, "rtol": 1e-2}
    assert compare.tolerance_for(compare.STRICT, torch.float32) == {"atol": 1e-4, "rtol": 1e-4}
    assert compare.tolerance_for(compare.STRICT, torch.float16) == {"atol": 1e-2, "rtol": 1e-2}
    assert compare.tolerance_for(compare.STRICT, torch.complex64) == {"atol": 1e-4, "rtol": 1e-4}
    assert math.isclose(compare.tolerance_for({"default": {"atol": 3, "rtol": 4}}, torch.float64)["rtol"], 4)


def test_comparison_in_chunks_finds_the_same_first_and_largest_difference(monkeypatch):
    monkeypatch.setattr(compare, "CHUNK", 7)
    expected = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    actual = expected.clone()
    actual[2, 5] += 1.0   # flat 25, in the fourth chunk
    actual[5, 9] += 3.0   # flat 59, the largest
    actual[4, 0] = float("nan")
    with pytest.raises(Failure) as failure:
        compare.compare_tensor(expected, actual, {"atol": 1e-2, "rtol": 1e-2}, "x")
    assert failure.value.reason == "non_finite" and failure.value.details["index"] == [4, 0]
    actual[4, 0] = expected[4, 0]
    with pytest.raises(Failure) as failure:
        compare.compare_tensor(expected, actual, {"atol": 1e-2, "rtol": 1e-2}, "x")
    assert failure.value.details["index"] == [2, 5]
    assert failure.value.details["mismatches"] == 2
    assert failure.value.details["worst_index"] == [5, 9]
    assert compare.compare_tensor(expected, expected.clone(), {"atol": 0.0, "rtol": 0.0}, "x")["max_abs_error"] == 0.0


def test_whole_output_hints_look_at_every_chunk(monkeypatch):
    monkeypatch.setattr(compare, "CHUNK", 7)
    expected = torch.rand(6, 10) + 1.0
    with pytest.raises(Failure) as failure:
        compare.compare_tensor(expected, torch.zeros(6, 10), {"atol": 1e-2, "rtol": 1e-2}, "x")
    assert "all zeros" in failure.value.message
    poisoned = torch.full((6 * 10 * 4,), compare.POISON_BYTE, dtype=torch.uint8).view(torch.float32).reshape(6, 10)
    with pytest.raises(Failure) as failure:
        compare.compare_tensor(expected, poisoned, {"atol": 1e-2, "rtol": 1e-2}, "x")
    assert failure.value.reason == "non_finite" and "Every byte" in failure.value.message
    partly = expected.clone()
    partly[5, 3:] = poisoned[5, 3:]
    with pytest.raises(Failure) as failure:
        compare.compare_tensor(expected, partly, {"atol": 1e-2, "rtol": 1e-2}, "x")
    assert failure.value.details["index"] == [5, 3] and "part of the output was never written" in failure.value.message

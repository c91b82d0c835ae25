# SPDX-License-Identifier: Apache-2.0
"""The trusted clock's parts on the CPU: the arena shared with another process, the layout
of a batch, the allocations served from the arena, the account of where outputs are, and
the read-back at secret positions. Whole sessions are in test_timing_session.py."""

import os
import random
import socket
import sys
import types

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "resources", "harness"))

torch = pytest.importorskip("torch")
from cuda_agent_harness.timing import arena, devices, sampling, trusted_clock  # noqa: E402

torch.set_num_threads(1)


def _spec(shape, dtype=torch.float32, index=0):
    count = 1
    for extent in shape:
        count *= extent
    return {"index": index, "shape": list(shape), "dtype": str(dtype).replace("torch.", ""),
            "nbytes": count * torch.empty((), dtype=dtype).element_size()}


# -- the arena -------------------------------------------------------------------------------


def test_an_arena_is_shared_with_another_process_and_cannot_be_shrunk_there(tmp_path):
    path = str(tmp_path / "a.sock")
    offer = arena.ArenaOffer(path)
    assert oct(os.stat(path).st_mode & 0o777) == "0o666"  # the candidate's process runs as another user
    pid = os.fork()
    if pid == 0:  # the candidate's side
        code = 1
        try:
            shared = arena.receive_arena(torch, "cpu", path, 0, 10.0)
            shared.view(64, (4,), torch.float32).copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
            try:
                os.ftruncate(shared.descriptor, 0)
            except PermissionError:
                code = 0  # the seal holds
        finally:
            os._exit(code)
    owned = arena.Arena.create(torch, "cpu", 1 << 16)
    offer.hand_over(owned, 10.0)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, "the candidate's side could shrink the arena"
    assert owned.view(64, (4,), torch.float32).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert not os.path.exists(path), "the socket is gone once the arena was handed over"
    owned.close()


def test_an_arena_socket_with_a_long_path_is_reached_through_its_directory(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = str(deep / "arena.sock")
    assert len(path) > 108
    offer = arena.ArenaOffer(path)
    pid = os.fork()
    if pid == 0:
        try:
            shared = arena.receive_arena(torch, "cpu", path, 0, 10.0)
            os._exit(0 if shared.size >= 4096 else 1)
        except BaseException:
            os._exit(1)
    owned = arena.Arena.create(torch, "cpu", 4096)
    offer.hand_over(owned, 10.0)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    owned.close()


def test_an_arena_is_handed_over_once_and_only_to_a_proper_request(tmp_path):
    path = str(tmp_path / "b.sock")
    offer = arena.ArenaOffer(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as intruder:
        intruder.connect(path)
        intruder.sendall(b"gimme!")
        owned = arena.Arena.create(torch, "cpu", 4096)
        with pytest.raises(arena.ArenaError, match="malformed"):
            offer.hand_over(owned, 5.0)
    with pytest.raises(OSError):  # the offer is closed after one connection
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as late:
            late.connect(path)
    with pytest.raises(arena.ArenaError, match="did not ask"):
        arena.ArenaOffer(str(tmp_path / "c.sock")).hand_over(owned, 0.2)
    owned.close()


def test_views_outside_the_arena_or_misaligned_are_refused():
    owned = arena.Arena.create(torch, "cpu", 4096)
    assert owned.view(4092, (1,), torch.float32).numel() == 1
    with pytest.raises(arena.ArenaError):
        owned.view(4092, (2,), torch.float32)
    with pytest.raises(arena.ArenaError):
        owned.view(2, (1,), torch.float32)
    owned.close()


# -- the layout ------------------------------------------------------------------------------


def test_a_layout_places_every_call_apart_at_offsets_drawn_for_the_session():
    inputs = [_spec((64, 33)), _spec((7,), torch.float64, index=2)]
    first = trusted_clock.Layout.plan(random.Random(1), 20, inputs, output_bytes=64 * 33 * 4)
    second = trusted_clock.Layout.plan(random.Random(2), 20, inputs, output_bytes=64 * 33 * 4)
    assert first.inputs != second.inputs, "offsets differ from session to session"
    spans = []
    for call in range(first.calls):
        for entry, spec in zip(first.inputs[call], inputs):
            assert entry["offset"] % trusted_clock.ALIGNMENT == 0
            spans.append((entry["offset"], entry["offset"] + spec["nbytes"]))
        start, end = first.outputs[call]
        assert end - start >= trusted_clock.OUTPUT_ROOM * 64 * 33 * 4
        spans.append((start, end))
    spans.sort()
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), "regions overlap"
    assert spans[-1][1] <= first.size
    again = trusted_clock.Layout.from_json(first.to_json())
    assert again.to_json() == first.to_json()


# -- allocations served from the arena -------------------------------------------------------


def test_allocations_as_large_as_an_output_come_from_the_call_s_region_until_it_is_full():
    owned = arena.Arena.create(torch, "cpu", 1 << 16)
    allocations = trusted_clock.ArenaAllocations(torch, owned, {4 * 100})
    allocations.begin((1024, 1024 + 512 + 400))  # room for two, the second aligned
    base = owned.bytes.data_ptr()
    with allocations.mode():
        served = torch.empty(100)
        like = torch.zeros_like(served)
        third = torch.empty(10, 10)  # the region is full: torch's own memory
        other = torch.empty(99)  # not an output's size
        doubles = torch.empty(50, dtype=torch.float64)  # the same bytes, another dtype: served too
    assert served.data_ptr() - base == 1024
    assert like.data_ptr() - base == 1024 + 400 + 112 and like.abs().sum() == 0  # aligned, zeroed
    for outside in (third, other, doubles):
        assert not 0 <= outside.data_ptr() - base < owned.size
    allocations.begin((8192, 8192 + 4096))
    with allocations.mode():
        strided = torch.empty_strided((10, 10), (1, 10))  # not contiguous: torch's own
        contiguous = torch.empty_strided((10, 10), (10, 1))
    assert not 0 <= strided.data_ptr() - base < owned.size
    assert contiguous.data_ptr() - base == 8192
    owned.close()


# -- the account of where outputs are, and the read-back -------------------------------------


class _Eager:
    regime = sampling.PER_CALL

    @staticmethod
    def function(x):
        return x * 2


def _clock(calls=4, shape=(8, 16)):
    device = devices.make_device(torch, "cpu")
    clock = trusted_clock.TrustedClock(torch, device, _Eager(), lambda seed: [torch.randn(*shape)], random.Random(5))
    clock.output_specs = [_spec(shape)]
    clock.layout = trusted_clock.Layout.plan(random.Random(3), calls, [_spec(shape)], _spec(shape)["nbytes"])
    clock.regions = [clock.layout.regions_of(call, torch) for call in range(calls)]
    clock.arena = arena.Arena.create(torch, "cpu", clock.layout.size)
    return clock


def _contiguous_at(offset, shape=(8, 16)):
    return {"offset": offset, "shape": list(shape), "strides": [shape[1], 1], "dtype": "float32"}


def test_outputs_must_have_the_reference_s_form_and_lie_apart_in_their_own_call_s_memory():
    clock = _clock()
    honest = [[_contiguous_at(clock.layout.outputs[call][0])] for call in range(4)]
    assert clock.validated_outputs(honest)
    # In place: an output may be its own call's input.
    in_place = [[_contiguous_at(clock.layout.inputs[call][0]["offset"])] for call in range(4)]
    assert clock.validated_outputs(in_place)

    def refused(described, words):
        with pytest.raises(trusted_clock.TrustedClockError, match=words) as failure:
            clock.validated_outputs(described)
        assert failure.value.reason == "timed_output_mismatch"

    shared = [list(each) for each in honest]
    shared[2] = [_contiguous_at(clock.layout.outputs[1][0])]  # call 2 hands over call 1's output
    refused(shared, "outside the memory of that call")
    inside = [list(each) for each in honest]
    inside[3] = [_contiguous_at(clock.layout.inputs[0][0]["offset"])]
    refused(inside, "outside the memory of that call")
    overlapping = [list(each) for each in honest]
    overlapping[0] = [_contiguous_at(clock.layout.outputs[0][0]), _contiguous_at(clock.layout.outputs[0][0] + 4)]
    clock.output_specs = clock.output_specs * 2
    refused([each * 2 if index else overlapping[0] for index, each in enumerate(honest)], "share memory")
    clock.output_specs = clock.output_specs[:1]
    wrong_shape = [[{**_contiguous_at(clock.layout.outputs[call][0]), "shape": [16, 8]}] for call in range(4)]
    refused(wrong_shape, "where the reference's is")
    misaligned = [[_contiguous_at(clock.layout.outputs[call][0] + 2)] for call in range(4)]
    refused(misaligned, "outside the memory")
    refused(honest[:3], "did not say where")
    refused([[{"offset": "x"}] for _ in range(4)], "malformed")
    clock.close()


@pytest.mark.parametrize("count", [1001, 1999, 12_345, 100_000])
def test_read_back_positions_cover_the_whole_output_one_per_stratum(count):
    clock = _clock()
    clock.settings["max_elements"] = 1000
    positions = clock.positions(count, seed=3)
    width = count / 1000
    stratum = torch.arange(1000, dtype=torch.float64)
    assert bool((positions >= torch.floor(stratum * width)).all())
    assert bool((positions <= torch.floor((stratum + 1) * width)).all())
    assert positions.max() < count
    assert not torch.equal(positions, clock.positions(count, seed=4)), "each batch draws its own"
    assert torch.equal(clock.positions(500, seed=3), torch.arange(500)), "small outputs are read whole"
    clock.close()


def test_the_read_back_follows_each_output_s_strides():
    clock = _clock(calls=2)
    start = clock.layout.outputs[1][0]
    base = torch.arange(8 * 16, dtype=torch.float32).reshape(8, 16)
    clock.arena.view(start, (16, 8), torch.float32).copy_(base.t())  # stored transposed
    described = [[_contiguous_at(clock.layout.outputs[0][0])],
                 [{"offset": start, "shape": [8, 16], "strides": [1, 8], "dtype": "float32"}]]
    logical = torch.tensor([0, 1, 17, 127])
    got = clock.read_back(described, [1], [[logical]])
    assert got[0][0].tolist() == base.reshape(-1)[logical].tolist()
    clock.close()


def test_outputs_compare_like_the_verifier_at_every_precision():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        want = torch.tensor([1.0, float("nan"), float("inf"), -2.0, 1000.0], dtype=dtype)
        assert trusted_clock._mismatch(torch, want, want * (1 + 5e-3), 1e-2, 1e-2) is None, dtype
        for position, value in ((1, 0.0), (2, float("-inf")), (4, 1020.0)):  # NaN lost, sign flipped, 2% off
            have = want.clone()
            have[position] = value
            problem = trusted_clock._mismatch(torch, want, have, 1e-2, 1e-2)
            assert f"sampled element {position}" in problem, (dtype, position, problem)
    assert "expected 3" in trusted_clock._mismatch(torch, torch.tensor([3]), torch.tensor([4]), 0.0, 0.0)


def test_the_absolute_tolerance_follows_the_magnitude_of_the_expected_output():
    small = torch.rand(4096) * 5e-4  # a softmax over long rows: values around 2.5e-4
    atol = trusted_clock._scaled_atol(small, 1e-2)
    assert atol < 1e-5
    assert trusted_clock._mismatch(torch, small, torch.zeros_like(small), atol, 1e-2) is not None
    assert trusted_clock._mismatch(torch, small, small * (1 + 5e-3), atol, 1e-2) is None
    assert trusted_clock._scaled_atol(torch.randn(4096) * 100, 1e-2) == 1e-2  # capped at the atol given
    assert trusted_clock._scaled_atol(torch.arange(5), 1e-2) == 1e-2  # integers compare exactly anyway


def test_the_judgement_rejects_a_reported_time_below_the_bound_by_more_than_the_margin():
    clock = _clock()
    clock.mode = "loop"
    clock.batches = [{"bound_us": value} for value in (100.0, 104.0, 98.0)]  # the fastest batch bounds
    margin = clock.margin(98.0 * clock.layout.calls)
    assert not clock.judge([98.0 * (1 - margin) + 1.0] * 5)["rejected"]
    verdict = clock.judge([98.0 * (1 - margin) - 1.0] * 5)
    assert verdict["rejected"] and verdict["ratio"] < 1 - margin and verdict["bound_us_fastest"] == 98.0
    assert clock.judge([])["ratio"] is None and not clock.judge([])["rejected"]
    # On a GPU, calls that ran one after another leave a shortfall unproven, not convicted.
    clock.device = types.SimpleNamespace(kind="cuda")
    clock.settings["overhead_us"] = {"cuda": 0.0}
    gpu = clock.judge([1.0] * 5)
    assert gpu["unbounded"] and not gpu["rejected"]
    clock.mode = "graph"
    assert clock.judge([1.0] * 5)["rejected"]
    assert clock.judge([1.0] * 5)["fastest_batch"]["elapsed_us"] is None  # what the batch's time was spent on
    # The margin grows by the protocol's overhead relative to the batch, and says so.
    clock.settings["overhead_us"] = {"cuda": 100.0}
    short = clock.judge([90.0] * 5)  # batches of 4 calls of about 100 µs: 25% on top
    assert short["margin"] == pytest.approx(clock.settings["margin"]["cuda"] + 100.0 / (98.0 * 4))
    assert not short["rejected"]
    clock.close()


def test_a_batch_too_short_against_its_overhead_proves_no_speed_within_its_wide_margin():
    clock = _clock(calls=1)
    clock.mode = "graph"
    clock.device = types.SimpleNamespace(kind="cuda")
    # One call of 2.7 ms and the protocol's 1 ms: a margin of 10% + 37%.
    clock.batches = [{"bound_us": 3700.0}]
    margin = clock.margin(3700.0)
    assert margin == pytest.approx(0.10 + 1000.0 / 3700.0)
    honest = clock.judge([2700.0] * 5)  # the call's own time: 73% of the bound
    assert honest["unbounded"] and honest["too_short_to_prove"] and not honest["rejected"]
    assert honest["proof_margin"] == 0.25
    forged = clock.judge([3700.0 * (1 - margin) - 10.0] * 5)  # below the whole margin: still convicted
    assert forged["rejected"] and not forged["unbounded"]
    close = clock.judge([3700.0 * 0.8] * 5)  # within the proof margin: proven
    assert not close["unbounded"] and not close["too_short_to_prove"] and not close["rejected"]
    # Batches long enough keep the margin under the proof margin: nothing changes there.
    clock.batches = [{"bound_us": 20000.0}]
    assert not clock.judge([20000.0 * 0.8] * 5)["unbounded"]
    # On the CPU there is no proof margin (speed earns nothing there).
    clock.device = types.SimpleNamespace(kind="cpu")
    clock.batches = [{"bound_us": 100.0}]
    cpu = clock.judge([50.0] * 5)
    assert cpu["proof_margin"] is None and not cpu["unbounded"] and not cpu["rejected"]
    clock.close()


def test_where_few_calls_fit_a_quarter_of_the_memory_the_arena_may_take_half(monkeypatch):
    clock = _clock()
    free = 100 << 30
    clock.device = types.SimpleNamespace(kind="cuda", index=0)
    fake_cuda = types.SimpleNamespace(mem_get_info=lambda index: (free, 2 * free))
    monkeypatch.setattr(clock, "torch", types.SimpleNamespace(cuda=fake_cuda))
    clock.settings["memory_bytes"] = {"cuda": 32 << 30}
    assert clock.arena_bytes(0.25, "memory_bytes") == 25 << 30
    assert clock.arena_bytes(0.5, "few_calls_memory_bytes") == 50 << 30
    clock.settings["few_calls_memory_bytes"] = {"cuda": 40 << 30}
    assert clock.arena_bytes(0.5, "few_calls_memory_bytes") == 40 << 30
    clock.close()


def test_a_guarded_function_has_its_guard_serve_the_allocations_only_while_serving():
    from cuda_agent_harness.timing.candidate_side import CandidateChecks, CandidateViolation

    device = devices.make_device(torch, "cpu")
    checks = CandidateChecks(torch, device, enabled=True, policy={})
    owned = arena.Arena.create(torch, "cpu", 1 << 16)
    allocations = trusted_clock.ArenaAllocations(torch, owned, {4 * 64})
    guarded = checks.guarded(lambda x: torch.empty_like(x))
    base = owned.bytes.data_ptr()
    allocations.begin((512, 4096))
    with guarded.serving(allocations):
        served = guarded(torch.ones(64))
    assert served.data_ptr() - base == 512
    outside = guarded(torch.ones(64))  # a sample: torch's own memory
    assert not 0 <= outside.data_ptr() - base < owned.size
    # The guard still refuses compute while it serves.
    computing = checks.guarded(lambda x: torch.relu(x))
    with computing.serving(allocations), pytest.raises(CandidateViolation):
        computing(torch.ones(4))
    owned.close()


def test_a_runner_that_does_not_serve_allocations_runs_no_dispatch_mode_and_copies_outputs():
    # A torch.compile function (the A/A benchmark's trusted contender) must never run under a
    # Python dispatch mode: Dynamo runs the frame eagerly from then on.
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    device = devices.make_device(torch, "cpu")
    shape = (8, 16)
    layout = trusted_clock.Layout.plan(random.Random(3), 2, [_spec(shape)], _spec(shape)["nbytes"])
    owned = arena.Arena.create(torch, "cpu", layout.size)
    modes = []

    def function(x):
        modes.append(_get_current_dispatch_mode())
        return x * 2

    runner = trusted_clock.TrustedBatchRunner(torch, device, function, owned, layout, [torch.zeros(shape)],
                                              {_spec(shape)["nbytes"]}, serve_allocations=False)
    for call in range(layout.calls):
        owned.view(layout.inputs[call][0]["offset"], shape, torch.float32).fill_(call + 1)
    described = runner.run()["outputs"]
    assert modes == [None, None]
    for call, leaves in enumerate(described):
        start, end = layout.outputs[call]
        assert start <= leaves[0]["offset"] < end  # copied into the call's own region
        assert bool((owned.view(leaves[0]["offset"], shape, torch.float32) == 2 * (call + 1)).all())
    assert runner.run()["copied_bytes"] == 2 * _spec(shape)["nbytes"]  # and says how much it copied
    served = trusted_clock.TrustedBatchRunner(torch, device, function, owned, layout, [torch.zeros(shape)],
                                              {_spec(shape)["nbytes"]})
    assert served.run()["copied_bytes"] == 2 * _spec(shape)["nbytes"]  # torch's multiply allocates out of reach
    assert all(mode is not None for mode in modes[4:])  # the default: served through a mode
    # A forward that ends in a copy (.clone(), .contiguous(), .to(dtype)) has it served.
    for ending in (lambda y: y.clone(), lambda y: y.t().contiguous().t().contiguous(), lambda y: y.double().float()):
        runner = trusted_clock.TrustedBatchRunner(torch, device, lambda x: ending(x * 2), owned, layout,
                                                  [torch.zeros(shape)], {_spec(shape)["nbytes"]})
        answer = runner.run()
        assert answer["copied_bytes"] == 0
        for call, leaves in enumerate(answer["outputs"]):
            start, end = layout.outputs[call]
            assert start <= leaves[0]["offset"] < end
            assert bool((owned.view(leaves[0]["offset"], shape, torch.float32) == 2 * (call + 1)).all())
    owned.close()


def test_an_output_made_after_more_scratch_buffers_than_the_region_holds_is_copied_beside_the_others():
    # Scratch buffers of an output's size fill the region; the output torch then allocates
    # elsewhere is copied over scratch the call left there, never over another output.
    device = devices.make_device(torch, "cpu")
    shape = (8, 16)
    specs = [_spec(shape), _spec(shape, index=1)]
    layout = trusted_clock.Layout.plan(random.Random(3), 2, [_spec(shape)], 2 * _spec(shape)["nbytes"])
    owned = arena.Arena.create(torch, "cpu", layout.size)

    def function(x):
        scratch = [torch.empty(shape) for _ in range(trusted_clock.OUTPUT_ROOM * 2)]
        for buffer in scratch:
            buffer.fill_(-7.0)
        first = torch.empty(shape)
        first.copy_(x)
        second = torch.empty(shape)
        second.copy_(x)
        return first, second

    runner = trusted_clock.TrustedBatchRunner(torch, device, function, owned, layout, [torch.zeros(shape)],
                                              {_spec(shape)["nbytes"]})
    for call in range(layout.calls):
        owned.view(layout.inputs[call][0]["offset"], shape, torch.float32).fill_(call + 1)
    answer = runner.run()
    for call, leaves in enumerate(answer["outputs"]):
        start, end = layout.outputs[call]
        spans = sorted((leaf["offset"], leaf["offset"] + specs[0]["nbytes"]) for leaf in leaves)
        assert all(start <= low and high <= end for low, high in spans)
        assert spans[0][1] <= spans[1][0], "the two outputs lie apart"
        for leaf in leaves:
            assert bool((owned.view(leaf["offset"], shape, torch.float32) == call + 1).all())
    assert answer["copied_bytes"] == 2 * 2 * _spec(shape)["nbytes"]
    owned.close()


def test_a_shortfall_that_copies_of_the_outputs_explain_leaves_the_speed_unproven_and_no_more():
    clock = _clock()
    clock.mode = "graph"
    clock.device = types.SimpleNamespace(kind="cuda")
    clock.settings["overhead_us"] = {"cuda": 0.0, "cpu": 0.0}
    clock.copy_us = 30.0  # a third of the 90 µs bound
    margin = clock.margin()
    clock.batches = [{"bound_us": 90.0, "copied_bytes": 4096.0}]
    explained = clock.judge([90.0 * (1 - margin) - 20.0] * 3)
    assert explained["unbounded"] and not explained["rejected"] and explained["copy_share"] == pytest.approx(1 / 3)
    assert clock.judge([90.0 * (1 - margin) - 31.0] * 3)["rejected"]  # more than one copy of the outputs
    clock.batches = [{"bound_us": 90.0, "copied_bytes": 0.0}]  # nothing copied: nothing to explain it
    assert clock.judge([90.0 * (1 - margin) - 20.0] * 3)["rejected"]
    # At most half the batch, and under the CPU's wide margin what is left of the bound still counts.
    clock.batches = [{"bound_us": 90.0, "copied_bytes": 4096.0}]
    clock.copy_us = 200.0
    assert clock.judge([90.0 * (1 - margin) / 2 + 1.0] * 3)["copy_share"] == 0.5
    assert clock.judge([90.0 * (1 - margin) / 2 - 1.0] * 3)["rejected"]
    clock.device = types.SimpleNamespace(kind="cpu")
    assert clock.judge([90.0 / 50] * 3)["rejected"]  # a fiftieth, with copies: still convicted
    clock.close()


def test_the_copy_allowance_is_the_bandwidth_of_one_copy_of_every_call_s_outputs_at_once():
    clock = _clock(calls=4)
    nbytes = _spec((8, 16))["nbytes"]
    timed = []

    def time_region(body):
        body()
        timed.append(True)
        return types.SimpleNamespace(elapsed_us=40.0)

    clock.device = types.SimpleNamespace(kind="cpu", synchronize=lambda: None, time_region=time_region)
    clock.arena.bytes[:4 * nbytes].fill_(7)
    assert clock.measure_copy_us(nbytes) == pytest.approx(10.0)  # one copy of the 4 calls' outputs, over 4
    assert len(timed) == 3 and bool((clock.arena.bytes[4 * nbytes:8 * nbytes] == 7).all())
    clock.close()

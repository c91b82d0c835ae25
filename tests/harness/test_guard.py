# SPDX-License-Identifier: Apache-2.0
"""The forward guard and the integrity snapshot: what may run inside forward, what is
refused even when the candidate catches the refusal, and what counts as tampering."""

import gc
import sys
import threading

import pytest
import torch
import torch.nn.functional as F

from cuda_agent_harness.checks import integrity
from cuda_agent_harness.checks.guard import ForbiddenOperation, ForwardGuard


def run_guarded(function):
    guard = ForwardGuard()
    error = None
    with torch.no_grad(), guard:
        try:
            function()
        except ForbiddenOperation as caught:
            error = caught
    return guard, error


ALLOWED = {
    "empty": lambda x: torch.empty(3, 4),
    "empty_like": lambda x: torch.empty_like(x),
    "zeros/ones/full": lambda x: (torch.zeros(3), torch.ones_like(x), torch.full((2,), 1.0)),
    "views": lambda x: (x.view(-1), x.reshape(4, 6), x.t().contiguous(), x.permute(1, 0), x[:, 1:3], x.unsqueeze(0),
                        x.flatten(), x.transpose(0, 1), x.narrow(0, 0, 2), x.chunk(2), x.split(2)),
    "metadata": lambda x: (x.shape, x.size(0), x.stride(), x.numel(), x.dim(), x.dtype, x.device, x.data_ptr(),
                           x.is_contiguous()),
    "copies and conversions": lambda x: (x.clone(), x.to(torch.float64), x.half(), torch.empty_like(x).copy_(x),
                                         x.detach(), torch.arange(4).to(torch.float32),
                                         torch.empty(4, dtype=torch.float64).copy_(torch.arange(4)),
                                         torch.ones(2, dtype=torch.bool).to(x.dtype)),
    # narrower integers where every value fits: the conversion is exact
    "int64 indices to int32": lambda x: (torch.arange(24).view(4, 6).to(torch.int32),
                                         torch.empty(24, dtype=torch.uint8).copy_(torch.arange(24))),
    "fills with numbers and same-dtype tensors": lambda x: (torch.empty(3, dtype=torch.int64).fill_(7),
                                                            torch.empty(3).fill_(x[0, 0])),
    "fills": lambda x: (torch.empty(3).fill_(1), torch.empty(3).zero_()),
    "a scalar": lambda x: x[0, 0].item(),
}

LAYER = torch.nn.Linear(6, 2)
COMPLEX = torch.complex(torch.randn(4, 6), torch.randn(4, 6))
#: Made outside the guard, as native code sets the bit where no operator runs.
NEGATED = torch._neg_view(torch.randn(4, 6))

FORBIDDEN = {
    "torch.matmul": (lambda x: torch.matmul(x, x.t()), "aten.mm"),
    "the @ operator": (lambda x: x @ x.t(), "aten.mm"),
    "torch.nn.functional": (lambda x: F.relu(x), "aten.relu"),
    "a Tensor compute method": (lambda x: x.sum(), "aten.sum"),
    "torch.ops.aten": (lambda x: torch.ops.aten.mm.default(x, x.t()), "aten.mm"),
    "an nn layer": (lambda x: LAYER(x), "aten.addmm"),
    "arithmetic": (lambda x: x + 1, "aten.add"),
    "a comparison": (lambda x: bool(x[0, 0] > 0), "aten.gt"),
    ".numpy()": (lambda x: x.numpy(), "Tensor.numpy"),
    ".tolist()": (lambda x: x.tolist(), "Tensor.tolist"),
    "torch.cat": (lambda x: torch.cat([x, x]), "aten.cat"),
    # conversions that compute: truncation, comparison with zero, the real part
    "float to int64 (trunc)": (lambda x: x.to(torch.int64), "aten._to_copy"),
    "float to bool (x != 0)": (lambda x: x.bool(), "aten._to_copy"),
    "float bits to bool (x != 0)": (lambda x: x.view(torch.int32).to(torch.bool), "aten._to_copy"),
    "int to bool (x != 0)": (lambda x: torch.ones(4, 6, dtype=torch.int64).bool(), "aten._to_copy"),
    "copy_ of floats into ints": (lambda x: torch.empty(4, 6, dtype=torch.int32).copy_(x), "aten.copy_"),
    "complex to real": (lambda x: torch.empty(4, 6).copy_(COMPLEX), "aten.copy_"),
    # narrower integers where values do not fit: x.to(torch.uint8) is x & 255
    "int64 to uint8 (x & 255)": (lambda x: torch.full((24,), 1000).to(torch.uint8), "aten._to_copy"),
    "copy_ of int64 into int16": (lambda x: torch.empty(2, dtype=torch.int16).copy_(torch.tensor([1, 1 << 20])),
                                  "aten.copy_"),
    "fill_ of an int tensor with a float element (trunc)": (
        lambda x: torch.empty(1, dtype=torch.int64).fill_(x[0, 0]), "aten.fill_"),
    # a copy of a lazily negated view computes -x inside copy_
    "copy_ of a negated view": (lambda x: torch.empty_like(x).copy_(NEGATED), "aten.copy_"),
    # a tensor's data turned into sizes and bounds on the host
    "torch.arange up to a tensor": (lambda x: torch.arange(0, torch.tensor(7)).numel(), "torch.arange"),
    "torch.full with a tensor fill value": (lambda x: torch.full((2,), x[0, 0]), "torch.full"),
    "Tensor.new_zeros sized by a tensor": (lambda x: x.new_zeros(torch.tensor(3)), "Tensor.new_zeros"),
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_creation_copy_and_metadata_are_allowed(name):
    x = torch.randn(4, 6)
    guard, error = run_guarded(lambda: ALLOWED[name](x))
    assert error is None and guard.first_violation() is None


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_compute_is_refused_and_recorded_even_when_caught(name):
    function, operation = FORBIDDEN[name]
    x = torch.randn(4, 6)

    def caught():
        try:
            function(x)
        except Exception:
            pass

    guard, error = run_guarded(caught)
    assert error is None  # the candidate swallowed the refusal...
    violation = guard.first_violation()
    assert violation is not None and operation in (violation["operation"], violation["called_as"])  # ...in vain


def test_the_python_call_behind_an_operator_is_named():
    x = torch.randn(4, 6)
    guard, error = run_guarded(lambda: torch.matmul(x, x.t()))
    assert "torch.matmul" in str(error) and "aten.mm" in str(error)


def test_extra_operators_can_be_allowed():
    guard = ForwardGuard(extra_allowed={"cat"})
    with torch.no_grad(), guard:
        torch.cat([torch.ones(1), torch.ones(1)])
    assert guard.first_violation() is None


def test_reading_many_scalars_one_by_one_is_host_computation():
    x = torch.randn(5000)
    guard, error = run_guarded(lambda: [x[i].item() for i in range(x.numel())])
    assert guard.first_violation() is not None and "one by one" in str(error)


def test_removing_the_guard_is_detected():
    from torch.utils._python_dispatch import _pop_mode

    guard = ForwardGuard()
    with torch.no_grad():
        guard.__enter__()
        popped = _pop_mode()
        assert popped is guard._dispatch_mode
        try:
            guard.__exit__(None, None, None)
        except Exception:
            pass
    assert guard.tampered


def test_replaced_functions_and_changed_settings_are_found():
    state = integrity.Integrity()
    assert state.violations() == []
    original = torch.allclose
    threads = torch.get_num_threads()
    try:
        torch.allclose = lambda *args, **kwargs: True
        torch.set_num_threads(max(1, threads - 1) if threads > 1 else 2)
        problems = state.violations()
    finally:
        torch.allclose = original
        torch.set_num_threads(threads)
    assert any("torch.allclose" in problem for problem in problems)
    assert any("get_num_threads" in problem for problem in problems)
    assert state.violations() == []


@pytest.mark.parametrize("install, remove, named", [
    (lambda hook: sys.setprofile(hook), lambda: sys.setprofile(None), "sys.getprofile()"),
    (lambda hook: threading.settrace(hook), lambda: threading.settrace(None), "threading.gettrace()"),
    (lambda hook: gc.callbacks.append(hook), lambda: gc.callbacks.pop(), "gc.callbacks"),
    (lambda hook: sys.meta_path.insert(0, hook), lambda: sys.meta_path.pop(0), "sys.meta_path"),
])
def test_hooks_that_run_code_inside_the_harness_are_found(install, remove, named):
    # Native code can install these without a Python name the scans would see: a profile
    # function sees every comparison the harness makes, a finder every later import.
    state = integrity.Integrity()
    install(lambda *args: None)
    try:
        problems = state.violations()
    finally:
        remove()
    assert any(named in problem for problem in problems), problems
    assert state.violations() == []


def test_widening_the_allowlist_is_detected_even_when_the_modes_stay():
    guard = ForwardGuard()
    with torch.no_grad(), guard:
        guard.allowed = guard.allowed | {"relu"}
        torch.relu(torch.ones(4))
    assert guard.tampered and "allowlist" in guard.first_violation()["why"]
    honest = ForwardGuard()
    with torch.no_grad(), honest:
        torch.empty(4)
    assert not honest.tampered and honest.first_violation() is None

# SPDX-License-Identifier: Apache-2.0
"""ModelNew's own Python state must stay the same from call to call once its first calls
have built their caches (checks/steadiness.py): counters, records of earlier inputs and
tensors changed in place are rejected; caches built on the first calls, attributes set to
the same value, BatchNorm's running statistics in train mode are not."""

import sys
import textwrap

import pytest
import torch

import verification_support as support
from cuda_agent_harness.checks import steadiness
from cuda_agent_harness.checks.compare import Failure
from cuda_agent_harness.checks.steadiness import SETTLING_CALLS, StateWatch
from cuda_agent_harness.modules import load_module

HEADER = """
import functools

import torch
import torch.nn as nn
"""


def load(tmp_path, body: str):
    path = tmp_path / "model_new.py"
    path.write_text(HEADER + textwrap.dedent(body))
    try:
        return load_module(str(path), "model_new")
    finally:
        sys.modules.pop("model_new", None)


def run(tmp_path, body: str, calls: int = 8, train: bool = False, inputs=None, init=(), kept_state=None):
    """Calls ModelNew ``calls`` times under a StateWatch, as the candidate handler does."""
    module = load(tmp_path, body)
    model = module.ModelNew(*init)
    model.train(train)
    weights = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    watch = StateWatch(model, module, weights=weights, buffers_fixed=not train, kept_state=kept_state)
    for call in range(calls):
        x = inputs(call) if inputs else torch.randn(4, 8)
        with torch.no_grad():
            output = model(x)
        watch.after_call(f"call {call + 1}", [output] if isinstance(output, torch.Tensor) else [], [x])
    watch.after_last_call()
    return model


def distinct_inputs():
    """Inputs at addresses no earlier call used (each is kept alive)."""
    kept = []

    def make(call):
        kept.append(torch.randn(8, 8))
        return kept[-1]
    return make


def rejected(tmp_path, body: str, **options) -> Failure:
    with pytest.raises(Failure) as caught:
        run(tmp_path, body, **options)
    assert caught.value.reason == "state_kept_between_calls"
    return caught.value


# -- rejected --------------------------------------------------------------------------------------

def test_a_counter_in_an_attribute_of_modelnew_is_rejected_once_the_settling_calls_are_over(tmp_path):
    failure = rejected(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.calls = 0

            def forward(self, x):
                self.calls += 1
                return x.clone()
    """)
    after = SETTLING_CALLS + 1
    assert failure.message.startswith(
        f"between the end of call {SETTLING_CALLS} and the end of call {after}, ModelNew.calls changed from"
        f" {SETTLING_CALLS} to {after}")
    assert "must depend only on its inputs and weights" in failure.message
    assert f"first {SETTLING_CALLS} calls" in failure.message
    assert failure.details["path"] == "ModelNew.calls"
    assert failure.details["calls"] == [f"call {SETTLING_CALLS}", f"call {after}"]


def test_a_counter_in_a_child_module_of_a_module_list_is_named_by_its_module_path(tmp_path):
    failure = rejected(tmp_path, """
        class Tally(nn.Module):
            def __init__(self):
                super().__init__()
                self.count = 0


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.tallies = nn.ModuleList([nn.Identity(), Tally()])

            def forward(self, x):
                for tally in self.tallies:
                    if isinstance(tally, Tally):
                        tally.count += 1
                return x.clone()
    """)
    assert failure.details["path"] == "ModelNew.tallies.1.count"
    assert "changed from 3 to 4" in failure.message


@pytest.mark.parametrize("body, path", [
    ("""
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.stats = {"calls": 0, "mode": "fast"}

            def forward(self, x):
                self.stats["calls"] += 1
                return x.clone()
    """, "ModelNew.stats['calls']"),
    ("""
        CALLS = [0]


        class ModelNew(nn.Module):
            def forward(self, x):
                CALLS[0] += 1
                return x.clone()
    """, "model_new.CALLS[0]"),
    ("""
        class ModelNew(nn.Module):
            calls = 0

            def forward(self, x):
                ModelNew.calls += 1
                return x.clone()
    """, "model_new.ModelNew.calls"),
])
def test_counters_in_a_dict_a_global_of_the_file_or_a_class_attribute_are_rejected(tmp_path, body, path):
    failure = rejected(tmp_path, body)
    assert failure.details["path"] == path, failure.message
    assert "changed from 3 to 4" in failure.message


def test_a_mutable_default_argument_that_grows_is_rejected(tmp_path):
    failure = rejected(tmp_path, """
        def remember(x, seen=[]):
            seen.append(x.data_ptr())
            return x.clone()


        class ModelNew(nn.Module):
            def forward(self, x):
                return remember(x)
    """)
    assert failure.details["path"] == "model_new.remember (defaults)[0]", failure.message
    assert "went from 3 to 4 element(s)" in failure.message


def test_a_small_cpu_tensor_incremented_in_place_is_read_by_its_contents(tmp_path):
    # As native code would do it: the same tensor, the same address, one more each call.
    failure = rejected(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.calls = torch.zeros(1, dtype=torch.int64)

            def forward(self, x):
                self.calls.add_(1)
                return x.clone()
    """)
    assert failure.details["path"] == "ModelNew.calls"
    assert "changed its contents from [3] to [4]" in failure.message


def test_a_memo_of_earlier_results_in_a_large_tensor_is_read_by_its_contents(tmp_path):
    # Keys and results of earlier calls in plain tensors too large to be read whole: a kernel
    # that finds the inputs' hash among the keys copies the remembered result out.
    failure = rejected(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.keys = torch.zeros(128, dtype=torch.float64)
                self.results = torch.zeros(8, 32)

            def forward(self, x):
                slot = int(self.keys[0].item()) % 8
                self.keys[1 + slot] = float(x.sum())
                self.keys[0] += 1
                self.results[slot].copy_(x.reshape(-1)[:32])
                return x.clone()
    """)
    assert failure.details["path"] in ("ModelNew.keys", "ModelNew.results"), failure.message
    assert "bytes of fingerprint" in failure.message and "allocate scratch memory in forward" in failure.message


def test_scratch_memory_kept_between_calls_is_state_even_when_rewritten_every_call(tmp_path):
    failure = rejected(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.scratch = torch.zeros(4, 8)

            def forward(self, x):
                torch.mul(x, 2.0, out=self.scratch)
                return self.scratch * 0.5
    """)
    assert failure.details["path"] == "ModelNew.scratch"


def test_static_buffers_holding_copies_of_the_call_s_input_and_output_pass(tmp_path):
    # The pattern of a CUDA graph replayed on static buffers: the input copied in, the
    # result computed into a static output, a copy of it returned.
    run(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.static_in = torch.zeros(4, 8)
                self.static_out = torch.zeros(4, 8)

            def forward(self, x):
                self.static_in.copy_(x)
                torch.clamp(self.static_in, min=0.0, out=self.static_out)
                return self.static_out.clone()
    """)


def test_a_static_buffer_that_keeps_an_earlier_call_s_input_is_rejected(tmp_path):
    # Two slots written in turn: after each call, one of them holds the call before's input.
    failure = rejected(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.slots = [torch.zeros(4, 8), torch.zeros(4, 8)]
                self.turn = [0]

            def forward(self, x):
                self.slots[self.turn[0] % 2].copy_(x)
                self.turn[0] += 1
                return x.clone()
    """)
    assert failure.details["path"].startswith(("ModelNew.slots", "ModelNew.turn")), failure.message


def test_the_contents_fingerprint_sees_every_change_of_bytes_and_nothing_else():
    fingerprint = steadiness.ContentsFingerprint(seed=7)
    x = torch.randn(3, 1000)
    assert fingerprint(x) == fingerprint(x.clone()) == fingerprint(x.t().contiguous().t())
    swapped = x.clone().reshape(-1)
    swapped[[10, 20]] = swapped[[20, 10]]
    assert fingerprint(swapped.reshape(3, 1000)) != fingerprint(x)
    nudged = x.clone()
    nudged[2, 999] = torch.nextafter(nudged[2, 999], torch.tensor(float("inf")))
    assert fingerprint(nudged) != fingerprint(x)
    odd = torch.arange(13, dtype=torch.uint8)
    assert fingerprint(odd)[1] == 13 and fingerprint(odd) != fingerprint(odd.roll(1))
    offset = torch.arange(20, dtype=torch.int16)[3:]
    assert fingerprint(offset) == fingerprint(offset.clone())
    long = torch.randn(3 * steadiness.ContentsFingerprint.PERIOD + 5)
    moved = long.clone()
    moved[-1] += 1.0
    assert fingerprint(long) != fingerprint(moved)


def test_a_counter_in_a_non_persistent_buffer_is_read_every_call(tmp_path):
    failure = rejected(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("calls", torch.zeros((), dtype=torch.int32), persistent=False)

            def forward(self, x):
                self.calls.add_(1)
                return x.clone()
    """)
    assert failure.details["path"] == "ModelNew.calls"


def test_a_counter_in_a_persistent_buffer_is_found_after_the_last_call(tmp_path):
    # Buffers of the state dict are not read every call (BatchNorm updates its own in train
    # mode); in eval mode they must still hold the loaded weights after the last call.
    body = """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("calls", torch.zeros(1))

            def forward(self, x):
                self.calls.add_(1)
                return x.clone()
    """
    failure = rejected(tmp_path, body)
    assert failure.details == {"tensor": "calls", "kind": "buffer"}
    assert "after the last call (call 8), ModelNew's buffer calls no longer holds what it held when the weights" \
           " were loaded" in failure.message
    run(tmp_path, body, train=True)  # in train mode buffers may change (running statistics)


def test_a_parameter_changed_in_place_is_rejected_after_the_last_call_in_either_mode(tmp_path):
    body = """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)

            def forward(self, x):
                self.fc.bias.add_(1)
                return x.clone()
    """
    for train in (False, True):
        failure = rejected(tmp_path, body, train=train)
        assert failure.details == {"tensor": "fc.bias", "kind": "parameter"}


def test_a_set_of_input_addresses_is_rejected_as_it_grows(tmp_path):
    failure = rejected(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.addresses = set()

            def forward(self, x):
                self.addresses.update([x.data_ptr()])
                return x.clone()
    """, inputs=distinct_inputs())
    assert failure.details["path"] == "ModelNew.addresses"
    assert "went from 3 to 4 element(s): gained 1 element(s)" in failure.message


def test_a_cache_keyed_on_input_addresses_is_rejected(tmp_path):
    failure = rejected(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.cache = {}

            def forward(self, x):
                key = x.data_ptr()
                if key not in self.cache:
                    self.cache[key] = x.clone()
                return self.cache[key]
    """, inputs=distinct_inputs())
    assert failure.details["path"].startswith("ModelNew.cache[")
    assert "was added (it holds a float32 tensor of shape [8, 8]" in failure.message


def test_a_tensor_attribute_replaced_every_call_is_rejected(tmp_path):
    failure = rejected(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.last = None

            def forward(self, x):
                self.last = x
                return x.clone()
    """, inputs=lambda call: torch.randn(16, 16))
    assert failure.details["path"] == "ModelNew.last"
    assert "now holds another tensor" in failure.message


def test_an_lru_cache_that_keeps_gaining_keys_is_rejected_one_keyed_on_shapes_is_not(tmp_path):
    template = """
        @functools.lru_cache(maxsize=None)
        def plan(key):
            return (key, 1)


        class ModelNew(nn.Module):
            def forward(self, x):
                plan(KEY)
                return x.clone()
    """
    failure = rejected(tmp_path, template.replace("KEY", "x.data_ptr()"), inputs=distinct_inputs())
    assert failure.details["path"] == "model_new.plan" and "cached new results" in failure.message
    run(tmp_path, template.replace("KEY", "tuple(x.shape)"))


def test_changes_stop_being_allowed_after_the_settling_calls(tmp_path):
    template = """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.built = 0

            def forward(self, x):
                self.built = min(self.built + 1, LAST)
                return x.clone()
    """
    run(tmp_path, template.replace("LAST", str(SETTLING_CALLS)))
    failure = rejected(tmp_path, template.replace("LAST", str(SETTLING_CALLS + 1)))
    assert failure.details["calls"] == [f"call {SETTLING_CALLS}", f"call {SETTLING_CALLS + 1}"]


def test_a_state_too_large_to_read_is_rejected_even_while_settling(tmp_path):
    with pytest.raises(Failure) as caught:
        run(tmp_path, """
            class ModelNew(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.table = list(range(70000))

                def forward(self, x):
                    return x.clone()
        """, calls=1)
    assert caught.value.reason == "state_kept_between_calls"
    assert f"holds more than {steadiness.MAX_VALUES} values" in caught.value.message
    assert caught.value.details["path"].startswith("ModelNew.table[")


def test_a_state_nested_too_deep_is_rejected(tmp_path):
    with pytest.raises(Failure) as caught:
        run(tmp_path, """
            class ModelNew(nn.Module):
                def __init__(self):
                    super().__init__()
                    nested = []
                    for _ in range(40):
                        nested = [nested]
                    self.nested = nested

                def forward(self, x):
                    return x.clone()
        """, calls=1)
    assert f"nested more than {steadiness.MAX_DEPTH} levels deep" in caught.value.message


# -- accepted --------------------------------------------------------------------------------------

def test_an_unchanged_model_with_weights_passes(tmp_path):
    run(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)
                self.register_buffer("low", torch.tensor(-6.0), persistent=False)

            def forward(self, x):
                return x.clamp(min=float(self.low)) @ self.fc.weight.t()
    """)


def test_warnings_that_forward_raises_leave_the_file_s_registry_of_warnings_alone(tmp_path):
    # The warnings module counts what it showed in each module's __warningregistry__, a
    # global that changes whenever a warning fires, whatever the candidate does.
    run(tmp_path, """
        import warnings

        class ModelNew(nn.Module):
            def forward(self, x):
                warnings.warn(f"shape {tuple(x.shape)}")
                return x.clone()
    """, inputs=lambda call: torch.randn(call + 1, 8))


def test_a_cache_built_on_the_first_call_and_a_buffer_registered_on_the_second_pass(tmp_path):
    run(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.outputs = {}
                self.table_due = False

            def forward(self, x):
                key = (tuple(x.shape), x.dtype)
                if key not in self.outputs:
                    self.outputs[key] = torch.empty_like(x)
                    self.table_due = True
                elif self.table_due:
                    self.register_buffer("table", torch.arange(4.0))
                    self.table_due = False
                out = self.outputs[key]
                out.copy_(x)
                return out
    """, inputs=lambda call: torch.randn(64, 64))


def test_a_small_persistent_output_buffer_rewritten_every_call_passes(tmp_path):
    # Its contents change every call, but it is the output the harness reads.
    run(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.out = None

            def forward(self, x):
                if self.out is None:
                    self.out = torch.empty_like(x)
                self.out.copy_(x.relu())
                return self.out
    """, inputs=lambda call: torch.randn(2, 4))


def test_attributes_set_to_the_same_value_every_call_pass(tmp_path):
    run(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.shape = None

            def forward(self, x):
                self.shape = x.shape
                self.dims = tuple(x.shape)
                self.device = x.device
                self.dtype = x.dtype
                self.scale = 0.5
                self.mode = "fast"
                self.sizes = [x.shape[0], x.shape[1]]
                self.settings = {"mode": "fast", "split": (1, 2)}
                self.nothing = float("nan")
                return x.clone()
    """)


def test_batchnorm_running_statistics_may_change_in_train_mode(tmp_path):
    body = """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.bn = nn.BatchNorm1d(8)

            def forward(self, x):
                return self.bn(x)
    """
    model = run(tmp_path, body, train=True)
    assert int(model.bn.num_batches_tracked) == 8  # they did change
    run(tmp_path, body, train=False)  # and in eval mode they stay as loaded


def test_reading_runs_none_of_the_candidate_s_methods(tmp_path):
    module = load(tmp_path, """
        LOOKUPS = [0]


        class Sneaky:
            def __init__(self):
                self.value = 1

            def __getattribute__(self, name):
                LOOKUPS[0] += 1
                return object.__getattribute__(self, name)

            def __eq__(self, other):
                raise RuntimeError("compared")

            def __hash__(self):
                raise RuntimeError("hashed")

            @property
            def trap(self):
                raise RuntimeError("read")


        class SneakyDict(dict):
            def items(self):
                raise RuntimeError("items")

            def __iter__(self):
                raise RuntimeError("iterated")


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.sneaky = Sneaky()
                self.table = SneakyDict(a=1)
                self.pair = [Sneaky(), {1: Sneaky()}]

            def forward(self, x):
                return x.clone()
    """)
    model = module.ModelNew()
    lookups = module.LOOKUPS[0]
    watch = StateWatch(model, module)
    for call in range(6):
        watch.after_call(f"call {call + 1}", [model(torch.ones(2))])
    watch.after_last_call()
    assert module.LOOKUPS[0] == lookups
    reading = dict(watch.read())["ModelNew"]
    attributes = dict(reading[3])
    assert attributes["sneaky"][0] == "object" and dict(attributes["sneaky"][3])["value"] == ("value", "int", 1)
    assert attributes["table"][2] == ((("value", "str", "a"), ("value", "int", 1)),)


def test_a_model_called_before_the_watch_starts_may_settle_on_no_calls(tmp_path):
    module = load(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.calls = 0

            def forward(self, x):
                self.calls += 1
                return x.clone()
    """)
    model = module.ModelNew()
    watch = StateWatch(model, module, settling_calls=0)
    watch.after_call("warm-up", [model(torch.ones(2))])
    with pytest.raises(Failure) as caught:
        watch.after_call("sample 1", [model(torch.ones(2))])
    assert caught.value.message.startswith("between the end of warm-up and the end of sample 1, ModelNew.calls")


# -- state the task's reference keeps too -------------------------------------------------------------

RECURRENT = """
    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = nn.Linear(16, 8)
            self.hidden = torch.zeros(4, 8)

        def forward(self, x):
            self.hidden = torch.tanh(self.cell(torch.cat((x, self.hidden), dim=1)))
            return self.hidden * 2
"""
HIDDEN = {"hidden": {"shape": [4, 8], "dtype": "torch.float32"}}


def test_the_hidden_state_the_reference_replaces_every_call_may_be_replaced_by_modelnew_too(tmp_path):
    failure = rejected(tmp_path, RECURRENT)
    assert failure.details["path"] == "ModelNew.hidden"
    assert "The task's reference keeps state" not in failure.message
    run(tmp_path, RECURRENT, kept_state=HIDDEN)


@pytest.mark.parametrize("kept, why", [
    ({"state": HIDDEN["hidden"]}, "another name"),
    ({"hidden": {"shape": [4, 9], "dtype": "torch.float32"}}, "another shape"),
    ({"hidden": {"shape": [4, 8], "dtype": "torch.float64"}}, "another dtype"),
])
def test_kept_state_of_another_name_shape_or_dtype_allows_nothing(tmp_path, kept, why):
    failure = rejected(tmp_path, RECURRENT, kept_state=kept)
    assert failure.details["path"] == "ModelNew.hidden", why
    assert "The task's reference keeps state of its own from call to call in Model." in failure.message


def recurrent_with(*lines: str) -> str:
    """RECURRENT with ``lines`` run after the new hidden state is computed."""
    return RECURRENT.replace("            return self.hidden * 2",
                             "".join(f"            {line}\n" for line in lines) + "            return self.hidden * 2")


def test_a_counter_next_to_the_kept_state_or_hung_on_it_is_still_rejected(tmp_path):
    failure = rejected(tmp_path, recurrent_with("self.calls = getattr(self, 'calls', 0) + 1"), kept_state=HIDDEN)
    assert failure.details["path"] == "ModelNew.calls"
    assert "Model.hidden (a tensor of shape [4, 8], torch.float32)" in failure.message

    # The count travels from each hidden state to the next, hung on the tensor itself.
    failure = rejected(tmp_path, recurrent_with("self.hidden.calls = getattr(self, 'count', 0) + 1",
                                                "self.count = self.hidden.calls"), kept_state=HIDDEN)
    assert failure.details["path"] == "ModelNew.hidden.calls", failure.details
    run(tmp_path, recurrent_with("self.hidden.label = 'hidden'"), kept_state=HIDDEN)  # the same every call
    failure = rejected(tmp_path, recurrent_with("self.hidden = [self.hidden]").replace(
        "torch.cat((x, self.hidden)", "torch.cat((x, self.hidden[0] if type(self.hidden) is list else self.hidden)")
        .replace("return self.hidden * 2", "return self.hidden[0] * 2"), kept_state=HIDDEN)
    assert failure.details["path"].startswith("ModelNew.hidden")


def test_the_log_of_the_reference_finds_a_replaced_hidden_state_and_nothing_in_a_stateless_model(tmp_path):
    recurrent = load(tmp_path, RECURRENT).ModelNew()
    log = steadiness.KeptStateLog(recurrent)
    for _ in range(3):
        with torch.no_grad():
            recurrent(torch.randn(4, 8))
        log.after_call()
    assert log.kept == HIDDEN

    stateless = load(tmp_path, """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = torch.ones(8)
                self.hidden = torch.zeros(4, 8)

            def forward(self, x):
                self.hidden = self.hidden.to(x.device)
                self.hidden.add_(0)
                return x * self.scale
    """).ModelNew()
    log = steadiness.KeptStateLog(stateless)
    for _ in range(3):
        stateless(torch.randn(4, 8))
        log.after_call()
    assert log.kept == {}


# -- through the candidate handler -------------------------------------------------------------------

def test_the_candidate_handler_rejects_a_countdown_and_accepts_a_shape_keyed_cache(tmp_path):
    countdown = support.MODEL_NEW.replace("        super().__init__()\n", "        super().__init__()\n"
                                          "        self.calls = 0\n")
    countdown = countdown.replace("        return cuda_extension.relu(x)\n",
                                  "        self.calls += 1\n"
                                  "        if self.calls <= 64:\n"
                                  "            return cuda_extension.relu(x)\n"
                                  "        return x\n")
    result, report = support.verify(tmp_path / "countdown", model_new=countdown, plan_seed=3)
    assert report["status"] == "rejected", report
    assert report["rejection"]["reason"] == "state_kept_between_calls"
    assert report["rejection"]["details"]["path"] == "ModelNew.calls"
    assert result["verdict"]["reason"] == "candidate_reported"

    cached = support.MODEL_NEW.replace("        super().__init__()\n", "        super().__init__()\n"
                                       "        self.buffers = {}\n")
    cached = cached.replace("        return cuda_extension.relu(x)\n",
                            "        key = tuple(x.shape)\n"
                            "        if key not in self.buffers:\n"
                            "            self.buffers[key] = torch.empty_like(x)\n"
                            "        out = self.buffers[key]\n"
                            "        out.copy_(cuda_extension.relu(x))\n"
                            "        return out\n")
    cached = "import torch\n" + cached
    result, report = support.verify(tmp_path / "cached", model_new=cached, plan_seed=3)
    assert report["status"] == "completed", report
    assert result["verdict"]["correct"], result["verdict"]


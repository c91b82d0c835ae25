# SPDX-License-Identifier: Apache-2.0
"""The baseline cache: keys, invalidation when any part of the key changes, merging of
regimes, and files that are corrupt, foreign or half-written."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "resources", "harness"))

from cuda_agent_harness.timing import baseline_cache  # noqa: E402

KEY = dict(
    task_hash="ab" * 32,
    gpu="NVIDIA H200",
    driver="580.65.06",
    torch="torch 2.11.0+cu130, cuda 13.0, triton 3.6.0",
    compile_mode="default",
    compile_backend="inductor",
    input_signature={"inputs": [{"shape": [4096, 393216], "dtype": "float32"}], "init_inputs": []},
    protocol="timing v1 cuda",
)


def measurement(eager=1000.0, compile_=800.0, rounds=12):
    return {
        "calibration_us": {"eager": eager, "compile": compile_},
        "rounds": [{"eager": eager + i, "compile": compile_ + i} for i in range(rounds)],
        "clock_mhz": 1980.0,
    }


def test_a_key_needs_exactly_its_fields():
    assert list(baseline_cache.make_key(**KEY)) == list(baseline_cache.KEY_FIELDS)
    partial = dict(KEY)
    del partial["driver"]
    with pytest.raises(ValueError, match="driver"):
        baseline_cache.make_key(**partial)
    with pytest.raises(ValueError, match="colour"):
        baseline_cache.make_key(**KEY, colour="blue")


def test_stored_baselines_come_back_for_the_same_key(tmp_path):
    cache = baseline_cache.BaselineCache(str(tmp_path))
    key = baseline_cache.make_key(**KEY)
    assert cache.load(key) == (None, "miss")
    path = cache.store(key, "per_call", measurement())
    assert os.path.dirname(path) == str(tmp_path)
    entry, status = cache.load(key)
    assert status == "hit"
    assert entry["regimes"]["per_call"]["rounds"][0] == {"eager": 1000.0, "compile": 800.0}
    assert entry["regimes"]["per_call"]["measured_at"]
    assert cache.regime(key, "per_call")[1] == "hit"
    assert cache.regime(key, "cuda_graph") == (None, "miss")
    assert [name for name in os.listdir(tmp_path) if name.endswith(".tmp")] == []


@pytest.mark.parametrize("field", baseline_cache.KEY_FIELDS)
def test_changing_any_part_of_the_key_invalidates(tmp_path, field):
    cache = baseline_cache.BaselineCache(str(tmp_path))
    cache.store(baseline_cache.make_key(**KEY), "per_call", measurement())
    changed = dict(KEY)
    changed[field] = {"changed": True} if field == "input_signature" else str(KEY[field]) + "-changed"
    assert cache.load(baseline_cache.make_key(**changed)) == (None, "miss")
    assert cache.load(baseline_cache.make_key(**KEY))[1] == "hit"


def test_input_shapes_are_part_of_the_key():
    torch = pytest.importorskip("torch")
    small = baseline_cache.input_signature([torch.zeros(2, 3), 5, [torch.zeros(1, dtype=torch.int64)]], torch)
    assert small == [{"shape": [2, 3], "dtype": "float32"}, 5, [{"shape": [1], "dtype": "int64"}]]
    large = baseline_cache.input_signature([torch.zeros(2, 4), 5, [torch.zeros(1, dtype=torch.int64)]], torch)
    a = baseline_cache.key_digest(baseline_cache.make_key(**{**KEY, "input_signature": small}))
    b = baseline_cache.key_digest(baseline_cache.make_key(**{**KEY, "input_signature": large}))
    assert a != b


def test_a_second_regime_joins_the_first(tmp_path):
    cache = baseline_cache.BaselineCache(str(tmp_path))
    key = baseline_cache.make_key(**KEY)
    cache.store(key, "per_call", measurement())
    cache.store(key, "cuda_graph", measurement(eager=20.0, compile_=9.0))
    entry, _ = cache.load(key)
    assert sorted(entry["regimes"]) == ["cuda_graph", "per_call"]
    cache.store(key, "per_call", measurement(eager=1100.0))
    assert cache.load(key)[0]["regimes"]["per_call"]["calibration_us"]["eager"] == 1100.0


@pytest.mark.parametrize(
    "content, reason",
    [
        ("{ not json", "JSONDecodeError"),
        ("[1, 2, 3]", "not a JSON object"),
        (json.dumps({"format": 99, "key": KEY, "regimes": {}}), "format 99"),
        (json.dumps({"format": 1, "key": {**KEY, "gpu": "NVIDIA H100"}, "regimes": {}}), "another key"),
        (json.dumps({"format": 1, "key": KEY, "regimes": {"per_call": {"rounds": [], "calibration_us": {}}}}), "no rounds"),
        (
            json.dumps(
                {"format": 1, "key": KEY,
                 "regimes": {"per_call": {"rounds": [{"eager": -1, "compile": 2}], "calibration_us": {}}}}
            ),
            "positive eager",
        ),
        ("", "JSONDecodeError"),  # a file cut short
    ],
)
def test_corrupt_files_are_misses_and_get_overwritten(tmp_path, content, reason):
    cache = baseline_cache.BaselineCache(str(tmp_path))
    key = baseline_cache.make_key(**KEY)
    with open(cache.path_for(key), "w") as handle:
        handle.write(content)
    entry, status = cache.load(key)
    assert entry is None
    assert status.startswith("corrupt") and reason in status
    cache.store(key, "per_call", measurement())
    assert cache.load(key)[1] == "hit"


def test_unusable_measurements_are_not_stored(tmp_path):
    cache = baseline_cache.BaselineCache(str(tmp_path))
    key = baseline_cache.make_key(**KEY)
    with pytest.raises(ValueError, match="no rounds"):
        cache.store(key, "per_call", {"rounds": [], "calibration_us": {}})
    with pytest.raises(ValueError, match="compile"):
        cache.store(key, "per_call", {"rounds": [{"eager": 1.0}], "calibration_us": {}})
    assert os.listdir(tmp_path) == []


def test_the_cache_directory_is_created_on_first_store(tmp_path):
    cache = baseline_cache.BaselineCache(str(tmp_path / "nested" / "cache"))
    cache.store(baseline_cache.make_key(**KEY), "batched", measurement())
    assert cache.load(baseline_cache.make_key(**KEY))[1] == "hit"


def test_driver_version_is_read_or_says_none():
    version = baseline_cache.driver_version()
    assert version == "none" or version[0].isdigit()

"""Persistence of PromptStatistics (``trl_adaptive/stats/serialization.py``, ``dataset.py``): format versions 1 to 3
(one stored state of each), missing keys, inconsistent and corrupt files, and the datasets export and import."""

import json
import subprocess
import sys

import numpy as np
import pytest

from trl_adaptive.stats import FORMAT_VERSION, PromptStatistics


def _full_store() -> PromptStatistics:
    stats = PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0)
    stats.update([10, 10, 11, 12], [0.7, 0.1, 0.9, np.nan])
    stats.set_prior([10, 13], [0.3, 0.9], weight=3.0)
    stats.set_fingerprints([10, 11, 14], ["a" * 16, "b" * 16, "c" * 16])
    stats.end_epoch()
    stats.update([10, 11, 11, 13], [0.6, 0.0, 0.2, 1.0])
    return stats


def test_version_2_round_trip_with_priors_and_fingerprints(tmp_path):
    stats = _full_store()
    state = stats.state_dict()
    assert state["version"] == FORMAT_VERSION == 4  # version 4 adds the length columns
    assert state["prompt_ids"] == [10, 11, 13, 14]  # 12 only had a NaN reward: no row
    assert state["fingerprints"] == ["a" * 16, "b" * 16, "", "c" * 16]
    assert state["columns"]["prior_attempts"] == [3.0, 0.0, 3.0, 0.0]
    assert state["columns"]["prior_visits"] == [1, 0, 1, 0]
    stats.save(tmp_path / "s.json")
    loaded = PromptStatistics.load(tmp_path / "s.json")
    assert loaded.state_dict() == state
    ids = [10, 11, 12, 13, 14, 15]
    for field in ("success_rate", "smoothed_rate", "beta_a", "beta_b", "attempts", "prior_attempts"):
        np.testing.assert_array_equal(getattr(loaded.batch(ids), field), getattr(stats.batch(ids), field))
    for s in (stats, loaded):
        s.update([10, 13], [1.0, 0.0])
    assert loaded.state_dict() == stats.state_dict()


def test_version_1_state_loads_without_priors_or_fingerprints(tmp_path):
    v1 = {
        "format": "trl_adaptive.PromptStatistics",
        "version": 1,
        "config": {"success_threshold": 1.0, "decay": 0.9, "prior_alpha": 1.0, "prior_beta": 16.0},
        "epoch": 1,
        "prompt_ids": [7, 9],
        "columns": {
            "current_successes": [0, 0],
            "current_attempts": [0, 0],
            "last_successes": [1, 0],
            "last_attempts": [2, 1],
            "total_successes": [1, 0],
            "total_attempts": [2, 1],
            "decayed_successes": [1.0, 0.0],
            "decayed_attempts": [2.0, 1.0],
        },
    }
    (tmp_path / "v1.json").write_text(json.dumps(v1))
    stats = PromptStatistics.load(tmp_path / "v1.json", decay=0.9)
    assert stats.epoch == 1 and len(stats) == 2 and stats.num_with_prior == 0
    np.testing.assert_allclose(stats.success_rates([7, 9]), [0.5, 0.0])
    np.testing.assert_allclose(stats.batch([7]).smoothed_rate, [2 / 19])
    assert stats.fingerprint_mismatches([7], ["f" * 16]).tolist() == []  # no stored fingerprint
    state = stats.state_dict()
    assert state["version"] == FORMAT_VERSION and state["fingerprints"] == ["", ""]
    assert state["columns"]["prior_attempts"] == [0.0, 0.0] and state["columns"]["prior_visits"] == [0, 0]
    fresh = PromptStatistics()
    fresh.load_state_dict(v1)
    assert fresh.state_dict() == state


@pytest.mark.parametrize("key", ["version", "config", "epoch", "prompt_ids", "columns", "fingerprints"])
def test_missing_keys_are_named(key, tmp_path):
    state = _full_store().state_dict()
    del state[key]
    target = PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0)
    with pytest.raises(ValueError, match=f"lacks the key '{key}'" if key != "config" else "config"):
        target.load_state_dict(state)
    assert len(target) == 0  # nothing half-loaded
    path = tmp_path / "s.json"
    path.write_text(json.dumps(state))
    with pytest.raises(ValueError, match=str(path)):
        PromptStatistics.load(path)


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda s: s["columns"].pop("prior_visits"), r"lacks columns \['prior_visits'\]"),
        (lambda s: s["columns"]["prior_successes"].__setitem__(0, 99.0), "prior_successes exceeds prior_attempts"),
        (lambda s: s["columns"]["last_successes"].__setitem__(0, 99), "last_successes exceeds last_attempts"),
        (lambda s: s["columns"]["total_attempts"].__setitem__(0, 1.5), "whole numbers"),
        (lambda s: s["columns"]["total_attempts"].__setitem__(0, "x"), "must be a list of numbers"),
        (lambda s: s["fingerprints"].pop(), "fingerprints and prompt_ids differ in length"),
        (lambda s: s["fingerprints"].__setitem__(0, None), "fingerprints must be a list of strings"),
        (lambda s: s.__setitem__("epoch", -1), "epoch must be an integer"),
        (lambda s: s.__setitem__("version", 5), "format version 5"),
    ],
)
def test_inconsistent_states_are_rejected(change, match):
    state = json.loads(json.dumps(_full_store().state_dict()))
    change(state)
    with pytest.raises(ValueError, match=match):
        PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0).load_state_dict(state)


def _set(column: str, row: int, value: float):
    return lambda s: s["columns"][column].__setitem__(row, value)


@pytest.mark.parametrize(
    "change, match",
    [  # _full_store's rows: ids 10, 11, 13, 14; epoch 1; id 14 has no evidence and no prior
        (_set("current_attempts", 3, 1), r"current_attempts exceeds total_attempts .*prompt ids \[14\]"),
        (_set("current_successes", 1, 2), r"current_successes exceeds total_successes .*\[11\]"),
        (_set("last_attempts", 2, 1), r"last_attempts exceeds total_attempts .*\[13\]"),
        (_set("current_attempts", 0, 2), r"current_attempts \+ last_attempts exceeds total_attempts .*\[10\]"),
        (_set("decayed_successes", 1, 2.9), r"decayed_successes exceeds decayed_attempts .*\[11\]"),
        (_set("decayed_attempts", 2, 5.0), r"decayed_attempts exceeds total_attempts .*\[13\]"),
        (_set("decayed_successes", 1, 1.5), r"decayed_successes exceeds total_successes .*\[11\]"),
        (_set("prior_visits", 1, 2), r"prior_visits .*\[11\].*no prior"),
        (lambda s: s.__setitem__("epoch", 0), r"last_attempts .*epoch 0"),
        (_set("total_attempts", 0, -1), r"column 'total_attempts' holds negative or non-finite"),
        (lambda s: s["columns"]["total_attempts"].pop(), r"column 'total_attempts' has 3 entries for 4 prompt ids"),
    ],
)
def test_contradicting_states_are_rejected_naming_the_fields(change, match):
    """Every invariant of a saved state, within one estimator and between estimators, is checked on load."""
    state = json.loads(json.dumps(_full_store().state_dict()))
    change(state)
    target = PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0)
    with pytest.raises(ValueError, match=match):
        target.load_state_dict(state)
    assert len(target) == 0  # nothing half-loaded


@pytest.mark.parametrize("damage", ["truncate", "empty", "binary"])
def test_corrupt_file_gives_a_clear_error(tmp_path, damage):
    path = tmp_path / "prompt_stats.json"
    _full_store().save(path)
    raw = path.read_bytes()
    path.write_bytes({"truncate": raw[: len(raw) // 2], "empty": b"", "binary": b"\xff\xfe\x00garbage"}[damage])
    with pytest.raises(ValueError, match="truncated or corrupt") as info:
        PromptStatistics.load(path)
    assert str(path) in str(info.value) and "earlier checkpoint" in str(info.value)


def test_version_2_state_loads_with_the_cumulative_posterior(tmp_path):
    # A version-2 file predates the posterior columns: the posterior starts from the cumulative counts, and the
    # configured half-life (and weak prior) of the loading store apply from there on.
    v3 = _full_store().state_dict()
    v2 = json.loads(json.dumps(v3))
    v2["version"] = 2
    for key in ("posterior_half_life", "posterior_prior_a", "posterior_prior_b", "length_decay"):
        del v2["config"][key]
    for key in ("posterior_successes", "posterior_failures", "length_tokens", "length_weight"):
        del v2["columns"][key]
    config = {"success_threshold": 0.5, "decay": 0.8, "prior_alpha": 0.5, "prior_beta": 4.0}
    plain = PromptStatistics(**config)
    plain.load_state_dict(v2)
    assert plain.state_dict() == v3  # without forgetting nothing is lost
    forgetting = PromptStatistics(**config, posterior_half_life=1.0)
    forgetting.load_state_dict(v2)
    np.testing.assert_array_equal(forgetting.batch([10, 11]).beta_a, plain.batch([10, 11]).beta_a)
    forgetting.update([], [])
    ids = [10, 11]
    np.testing.assert_allclose(forgetting.batch(ids).beta_a - 1 - np.array([0.9, 0]), 0.5 * np.array([2, 1]))
    (tmp_path / "v2.json").write_text(json.dumps(v2))
    loaded = PromptStatistics.load(tmp_path / "v2.json", posterior_half_life=6.0)
    assert loaded.posterior_half_life == 6.0 and loaded.config["decay"] == 0.8
    assert PromptStatistics.load(tmp_path / "v2.json").posterior_half_life is None


def test_posterior_evidence_above_the_counts_is_rejected():
    state = json.loads(json.dumps(_full_store().state_dict()))
    state["columns"]["posterior_successes"][0] = 99.0
    with pytest.raises(ValueError, match="posterior's evidence exceeds the cumulative counts"):
        PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0).load_state_dict(state)
    state = json.loads(json.dumps(_full_store().state_dict()))
    del state["columns"]["posterior_failures"]
    with pytest.raises(ValueError, match=r"lacks columns \['posterior_failures'\]"):
        PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0).load_state_dict(state)


def test_every_stored_column_has_one_owner_and_import_paths_hold():
    from trl_adaptive.stats import ESTIMATORS, PriorCounts, stable_prompt_ids
    from trl_adaptive.stats.lengths import CompletionLength
    from trl_adaptive.stats.serialization import COLUMNS, V1_COLUMNS, V2_COLUMNS, V3_COLUMNS

    owners = [name for part in (*ESTIMATORS, PriorCounts, CompletionLength) for name in part.columns]
    assert sorted(owners) == sorted(COLUMNS) and len(set(owners)) == len(owners) == 15
    assert V1_COLUMNS == COLUMNS[:8] and V2_COLUMNS == COLUMNS[:11] and V3_COLUMNS == COLUMNS[:13]
    assert [e.name for e in ESTIMATORS] == ["epoch_rate", "decayed_rate", "posterior"]
    assert stable_prompt_ids(["a3f9c2"]).tolist() == [2513115939235962885]
    code = "import sys, trl_adaptive.stats; print(sorted({'torch', 'trl', 'datasets'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # NumPy only: no torch, no trl, and datasets only inside to_dataset / from_dataset


# Stored states, one per format version ever written, as a checkpoint would hold them.
STORED_V1 = {
    "format": "trl_adaptive.PromptStatistics",
    "version": 1,
    "config": {"success_threshold": 1.0, "decay": 0.9, "prior_alpha": 1.0, "prior_beta": 16.0},
    "epoch": 2,
    "prompt_ids": [7, 9],
    "columns": {
        "current_successes": [1, 0],
        "current_attempts": [2, 0],
        "last_successes": [3, 0],
        "last_attempts": [4, 4],
        "total_successes": [4, 0],
        "total_attempts": [6, 4],
        "decayed_successes": [1.27, 0.0],
        "decayed_attempts": [5.6, 4.0],
    },
}


STORED_V2 = {
    "format": "trl_adaptive.PromptStatistics",
    "version": 2,
    "config": {"success_threshold": 0.5, "decay": 0.8, "prior_alpha": 1.0, "prior_beta": 16.0},
    "epoch": 1,
    "prompt_ids": [3, 5, 8],
    "fingerprints": ["1f0e5c8a9b2d4e67", "", "a" * 16],
    "columns": {
        "current_successes": [0, 1, 0],
        "current_attempts": [0, 2, 0],
        "last_successes": [2, 1, 0],
        "last_attempts": [4, 2, 0],
        "total_successes": [2, 2, 0],
        "total_attempts": [4, 4, 0],
        "decayed_successes": [2.0, 1.8, 0.0],
        "decayed_attempts": [4.0, 3.6, 0.0],
        "prior_successes": [0.0, 0.0, 6.0],
        "prior_attempts": [0.0, 0.0, 8.0],
        "prior_visits": [0, 0, 0],
    },
}


STORED_V3 = {
    "format": "trl_adaptive.PromptStatistics",
    "version": 3,
    "config": {
        "success_threshold": 1.0,
        "decay": 0.9,
        "prior_alpha": 1.0,
        "prior_beta": 16.0,
        "posterior_half_life": 4.0,
        "posterior_prior_a": 0.5,
        "posterior_prior_b": 0.5,
    },
    "epoch": 1,
    "prompt_ids": [7, 9],
    "fingerprints": ["1f0e5c8a9b2d4e67", ""],
    "columns": {
        "current_successes": [0, 0],
        "current_attempts": [0, 0],
        "last_successes": [1, 0],
        "last_attempts": [2, 1],
        "total_successes": [1, 0],
        "total_attempts": [2, 1],
        "decayed_successes": [1.0, 0.0],
        "decayed_attempts": [2.0, 1.0],
        "prior_successes": [2.0, 0.0],
        "prior_attempts": [8.0, 0.0],
        "prior_visits": [1, 0],
        "posterior_successes": [0.8408964152537145, 0.0],
        "posterior_failures": [0.8408964152537145, 0.8408964152537145],
    },
}


def test_stored_version_1_state_reads_as_a_store_without_priors_or_fingerprints(tmp_path):
    (tmp_path / "v1.json").write_text(json.dumps(STORED_V1))
    stats = PromptStatistics.load(tmp_path / "v1.json")
    b = stats.batch([7, 9])
    assert b.success_rate.tolist() == [0.75, 0.0] and stats.epoch == 2 and stats.num_with_prior == 0
    assert b.smoothed_rate.tolist() == [(1 + 1.27) / (17 + 5.6), 1 / 21]
    assert b.beta_a.tolist() == [5.0, 1.0] and b.beta_b.tolist() == [3.0, 5.0]  # the cumulative counts
    state = stats.state_dict()
    assert state["version"] == 4 and state["fingerprints"] == ["", ""]
    assert state["columns"]["posterior_failures"] == [2.0, 4.0] and state["config"]["posterior_half_life"] is None
    assert STORED_V1["version"] == 1 and "posterior_failures" not in STORED_V1["columns"]  # the input is untouched


def test_stored_version_2_state_reads_with_its_priors_and_the_cumulative_posterior():
    stats = PromptStatistics(success_threshold=0.5, decay=0.8, posterior_half_life=2.0)
    stats.load_state_dict(json.loads(json.dumps(STORED_V2)))
    b = stats.batch([3, 5, 8])
    assert b.success_rate.tolist() == [0.5, 0.5, 0.75] and b.prior_attempts.tolist() == [0.0, 0.0, 8.0]
    assert b.beta_a.tolist() == [3.0, 3.0, 7.0] and b.beta_b.tolist() == [3.0, 3.0, 3.0]
    assert stats.fingerprint_mismatches([3, 8], ["1f0e5c8a9b2d4e67", "b" * 16]).tolist() == [8]
    stats.update([], [])  # this store's half-life applies from the load on
    assert stats.batch([3]).beta_a.tolist() == [1 + 2 * 2**-0.5]


def test_stored_version_3_state_reads_with_no_length_measured_and_keeps_every_count(tmp_path):
    (tmp_path / "v3.json").write_text(json.dumps(STORED_V3))
    stats = PromptStatistics.load(tmp_path / "v3.json", posterior_half_life=4.0, length_decay=0.5)
    state = stats.state_dict()
    assert state["version"] == 4 and state["config"] == {**STORED_V3["config"], "length_decay": 0.5}
    assert state["columns"] == {**STORED_V3["columns"], "length_tokens": [0.0, 0.0], "length_weight": [0.0, 0.0]}
    assert {k: v for k, v in state.items() if k not in ("version", "config", "columns")} == {
        k: v for k, v in STORED_V3.items() if k not in ("version", "config", "columns")
    }
    assert np.isnan(stats.expected_tokens([7, 9])).all()
    stats.save(tmp_path / "again.json")
    assert PromptStatistics.load(tmp_path / "again.json").state_dict() == state  # version 4 round-trips exactly
    b = stats.batch([7, 9])
    assert b.beta_a.tolist() == [0.5 + 2.0 + 0.8408964152537145, 0.5]
    assert b.smoothed_rate.tolist() == [(1 + 1.0 + 0.9 * 2) / (17 + 2.0 + 0.9 * 8), 1 / 18]


# ---- the datasets export and import (trl_adaptive/stats/dataset.py) -------------------------------------------------
def test_to_dataset_columns_and_metadata():
    stats = _full_store()
    ds = stats.to_dataset()
    assert ds.column_names[:3] == ["prompt_id", "prompt_fingerprint", "success_rate"]
    assert {
        f: ds.features[f].dtype for f in ("prompt_id", "prompt_fingerprint", "total_attempts", "prior_visits")
    } == {
        "prompt_id": "int64",
        "prompt_fingerprint": "string",
        "total_attempts": "int64",
        "prior_visits": "int64",
    }
    assert ds.features["decayed_successes"].dtype == ds.features["prior_attempts"].dtype == "float64"
    ids = ds["prompt_id"][:]
    np.testing.assert_array_equal(np.asarray(ds["success_rate"][:]), stats.success_rates(ids))
    assert list(ds["prompt_fingerprint"][:]) == stats.state_dict()["fingerprints"]
    meta = json.loads(ds.info.description)
    assert meta == json.loads(ds.features["prompt_id"].id)
    assert meta == {"format": "trl_adaptive.PromptStatistics", "version": 4, "config": stats.config, "epoch": 1}


def test_dataset_round_trips(tmp_path):
    import datasets

    stats = _full_store()
    want = stats.state_dict()
    ds = stats.to_dataset()
    assert PromptStatistics.from_dataset(ds, decay=0.8).state_dict() == want
    ds.save_to_disk(str(tmp_path / "disk"))
    assert PromptStatistics.from_dataset(datasets.load_from_disk(str(tmp_path / "disk"))).state_dict() == want
    ds.to_parquet(str(tmp_path / "stats.parquet"))
    from_parquet = datasets.Dataset.from_parquet(str(tmp_path / "stats.parquet"))
    assert from_parquet.info.description in ("", None)  # parquet drops the description: the feature id carries it
    assert PromptStatistics.from_dataset(from_parquet).state_dict() == want
    # Reordered / selected rows: same statistics per id.
    shuffled = PromptStatistics.from_dataset(ds.shuffle(seed=0))
    ids = [10, 11, 12, 13, 14, 15]
    for field in ("success_rate", "smoothed_rate", "beta_a", "beta_b", "attempts", "prior_attempts"):
        np.testing.assert_array_equal(getattr(shuffled.batch(ids), field), getattr(stats.batch(ids), field))
    assert shuffled.fingerprint_mismatches([10, 11, 14], ["a" * 16, "b" * 16, "c" * 16]).tolist() == []
    assert len(PromptStatistics.from_dataset(ds.select([0, 2]))) == 2
    empty = PromptStatistics()
    assert PromptStatistics.from_dataset(empty.to_dataset()).state_dict() == empty.state_dict()


def test_from_dataset_errors():
    import datasets

    ds = _full_store().to_dataset()
    with pytest.raises(ValueError, match="decay=0.8 but this run uses decay=0.9"):
        PromptStatistics.from_dataset(ds, decay=0.9)
    with pytest.raises(TypeError, match="Unknown PromptStatistics config"):
        PromptStatistics.from_dataset(ds, threshold=1.0)
    rates_only = datasets.Dataset.from_dict({"prompt_id": [0, 1], "success_rate": [0.5, float("nan")]})
    with pytest.raises(ValueError, match=r"lacks the columns \['prompt_fingerprint', 'current_successes'.*set_prior"):
        PromptStatistics.from_dataset(rates_only)
    with pytest.raises(ValueError, match="lacks the columns.*'prior_visits'"):
        PromptStatistics.from_dataset(ds.remove_columns("prior_visits"))
    with pytest.raises(TypeError, match="pass e.g. dataset\\['train'\\]"):
        PromptStatistics.from_dataset(datasets.DatasetDict({"train": ds}))
    with pytest.raises(TypeError, match="datasets.Dataset"):
        PromptStatistics.from_dataset(ds.to_dict())
    stripped = datasets.Dataset.from_dict(ds.to_dict())  # rebuilt: no metadata
    with pytest.raises(ValueError, match="no PromptStatistics metadata"):
        PromptStatistics.from_dataset(stripped)
    bad = ds.map(lambda row: {"prior_successes": 100.0})
    with pytest.raises(ValueError, match="dataset: PromptStatistics state: prior_successes exceeds"):
        PromptStatistics.from_dataset(bad)

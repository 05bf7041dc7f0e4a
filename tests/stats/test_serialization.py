"""Persistence of PromptStatistics (``trl_adaptive/stats/serialization.py``, ``dataset.py``): format version 4 (the
development formats 1 to 3 are refused), missing keys, inconsistent and corrupt files, and the datasets export and
import."""

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


def test_round_trip_with_priors_and_fingerprints(tmp_path):
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


@pytest.mark.parametrize("version", [1, 2, 3])
def test_development_format_versions_are_refused_naming_the_readable_one(tmp_path, version):
    """Versions 1 to 3 were never released: a file of one is refused, whatever it holds, saying what is read."""
    state = {**_full_store().state_dict(), "version": version}
    del state["config"]["length_decay"]  # version 3 saved no length settings: the version is named first
    with pytest.raises(ValueError, match=rf"format version {version}; this code reads versions \[4\]"):
        PromptStatistics(success_threshold=0.5, decay=0.8, prior_alpha=0.5, prior_beta=4.0).load_state_dict(state)
    (tmp_path / "old.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match=rf"format version {version}"):
        PromptStatistics.load(tmp_path / "old.json")


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
    from trl_adaptive.stats.serialization import COLUMNS

    owners = [name for part in (*ESTIMATORS, PriorCounts, CompletionLength) for name in part.columns]
    assert sorted(owners) == sorted(COLUMNS) and len(set(owners)) == len(owners) == 15
    assert [e.name for e in ESTIMATORS] == ["epoch_rate", "decayed_rate", "posterior"]
    assert stable_prompt_ids(["a3f9c2"]).tolist() == [2513115939235962885]
    code = "import sys, trl_adaptive.stats; print(sorted({'torch', 'trl', 'datasets'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # NumPy only: no torch, no trl, and datasets only inside to_dataset / from_dataset


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

"""AdaptiveGRPOConfig: parses like any TRL config and rejects impossible settings with a message naming the fix."""

from __future__ import annotations

import dataclasses

import pytest
from datasets import Dataset, IterableDataset
from trainer_helpers import make_dataset, reward_length, tiny_config_kwargs
from trl import GRPOConfig, TrlParser

from trl_adaptive import AdaptiveGRPOConfig, AdaptiveGRPOTrainer
from trl_adaptive.allocation import UniformAllocator

NEW_FIELDS = [
    f for f in dataclasses.fields(AdaptiveGRPOConfig) if f.name not in {g.name for g in dataclasses.fields(GRPOConfig)}
]


def test_every_new_field_has_help_and_is_documented():
    assert {f.name for f in NEW_FIELDS} >= {"allocator", "min_rollouts", "max_rollouts", "success_threshold"}
    for f in NEW_FIELDS:
        assert f.metadata.get("help"), f"{f.name} has no help text"
        assert f"{f.name} (" in AdaptiveGRPOConfig.__doc__, f"{f.name} missing from the docstring"
        default = repr(f.default).replace("'", '"') if f.default is not None else None
        if default is not None:
            assert f"defaults to `{default}`" in AdaptiveGRPOConfig.__doc__, f"{f.name}: docstring default out of sync"


def test_trl_parser_reads_the_new_fields(tmp_path):
    parser = TrlParser(AdaptiveGRPOConfig)
    (args,) = parser.parse_args_into_dataclasses(
        [
            "--output_dir",
            str(tmp_path),
            "--allocator",
            "uniform",
            "--max_rollouts",
            "32",
            "--allocator_kwargs",
            "{}",
            "--equal_prompt_weighting",
            "true",
            "--use_cpu",
            "true",
        ]
    )
    assert args.allocator == "uniform" and args.max_rollouts == 32 and args.allocator_kwargs == {}
    assert args.equal_prompt_weighting is True
    (args,) = parser.parse_args_into_dataclasses(
        [
            "--output_dir",
            str(tmp_path),
            "--posterior_half_life",
            "12.5",
            "--posterior_prior_a",
            "0.5",
            "--use_cpu",
            "1",
        ],
    )
    assert args.posterior_half_life == 12.5 and args.posterior_prior_a == 0.5 and args.posterior_prior_b == 1.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"allocator": "nope"}, "allocator='nope' is not a registered allocator"),
        ({"min_rollouts": 1}, "min_rollouts=1"),
        ({"max_rollouts": 3}, "num_generations=4 is the average"),
        ({"min_rollouts": 5, "max_rollouts": 8}, "num_generations=4 is the average"),
        ({"allocator_kwargs": "{not json"}, "allocator_kwargs is not valid JSON"),
        ({"num_generations": 1}, "at least 2 generations"),
        ({"prompt_id_column": "x", "success_rate_column": "x"}, "different names"),
        (
            {"allocator": "bayes_knapsack", "allocator_kwargs": {"fallback": True}},
            "allocator='bayes_knapsack' takes no ['fallback']; it takes min_rollouts, max_rollouts, solver",
        ),
        ({"allocator": "uniform", "allocator_kwargs": '{"eta": 1}'}, "allocator='uniform' takes no ['eta']"),
        ({"posterior_half_life": 0}, "posterior_half_life=0: must be a finite number of steps > 0"),
        ({"posterior_half_life": -3.0}, "posterior_half_life=-3.0: must be a finite number of steps > 0"),
        ({"posterior_half_life": float("inf")}, "posterior_half_life=inf"),
        ({"posterior_prior_a": 0.0}, "posterior_prior_a=0.0: must be > 0"),
        ({"posterior_prior_b": -1.0}, "posterior_prior_b=-1.0: must be > 0"),
        ({"posterior_prior_a": float("nan")}, "posterior_prior_a=nan: must be finite"),
    ],
)
def test_invalid_config_fails_at_construction(tmp_path, overrides, message):
    kwargs = tiny_config_kwargs(str(tmp_path))
    kwargs.update(overrides)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        AdaptiveGRPOConfig(**kwargs)


def test_indivisible_generation_batch_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="divisible"):
        AdaptiveGRPOConfig(
            **tiny_config_kwargs(str(tmp_path), generation_batch_size=10, per_device_train_batch_size=4)
        )


def _trainer(tiny_model_dir, tmp_path, dataset=None, **kwargs):
    args = AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path)), allocator="uniform")
    return AdaptiveGRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=reward_length,
        args=args,
        train_dataset=make_dataset(8) if dataset is None else dataset,
        **kwargs,
    )


@pytest.mark.parametrize(
    ("dataset", "error", "message"),
    [
        (Dataset.from_dict({"question": ["a", "b"]}), ValueError, "no 'prompt' column"),
        (Dataset.from_dict({"prompt": ["a", "b"], "prompt_id": [0.5, 1.5]}), TypeError, "all integers or all strings"),
        (Dataset.from_dict({"prompt": ["a", "b"], "prompt_id": ["x", "x"]}), ValueError, r"duplicate ids, e.g. \['x'"),
        (Dataset.from_dict({"prompt": ["a", "b"], "prompt_id": [3, 3]}), ValueError, "duplicate ids"),
        (Dataset.from_dict({"prompt": ["a", "b"], "success_rate": ["hi", "lo"]}), TypeError, "success_rate"),
    ],
)
def test_bad_dataset_fails_at_construction(tiny_model_dir, tmp_path, dataset, error, message):
    with pytest.raises(error, match=message):
        _trainer(tiny_model_dir, tmp_path, dataset)


def test_unsupported_features_fail_at_construction(tiny_model_dir, tmp_path):
    iterable = IterableDataset.from_generator(lambda: iter([{"prompt": "a"}]))
    with pytest.raises(TypeError, match="map-style datasets.Dataset"):
        _trainer(tiny_model_dir, tmp_path, iterable)
    with pytest.raises(NotImplementedError, match="multimodal"):
        _trainer(tiny_model_dir, tmp_path, Dataset.from_dict({"prompt": ["a"], "image": [None]}))
    with pytest.raises(TypeError, match="AdaptiveGRPOConfig"):
        AdaptiveGRPOTrainer(
            model=str(tiny_model_dir),
            reward_funcs=reward_length,
            args=GRPOConfig(**tiny_config_kwargs(str(tmp_path))),
            train_dataset=make_dataset(8),
        )


def test_allocator_object_with_infeasible_bounds_fails_at_construction(tiny_model_dir, tmp_path):
    # 2 prompts x 4 completions = 8, but every prompt would need at least 5.
    with pytest.raises(ValueError, match="budget=8 cannot be split over 2 prompts"):
        _trainer(tiny_model_dir, tmp_path, allocator=UniformAllocator(min_rollouts=5, max_rollouts=8))


def test_fixed_seed_in_server_mode_is_rejected(tiny_model_dir, tmp_path):
    args = AdaptiveGRPOConfig(
        **tiny_config_kwargs(str(tmp_path)),
        allocator="uniform",
        use_vllm=True,
        vllm_mode="server",
        generation_kwargs={"seed": 1},
    )
    with pytest.raises(ValueError, match=r"generation_kwargs\['seed'\]"):
        AdaptiveGRPOTrainer(
            model=str(tiny_model_dir), reward_funcs=reward_length, args=args, train_dataset=make_dataset(8)
        )


@pytest.mark.parametrize(("name", "expected"), [("knapsack", 128), ("reinforce_ada_est", 32), ("cero", 16)])
def test_unset_max_rollouts_keeps_each_allocators_default(tmp_path, name, expected):
    from trl_adaptive.trainer.inputs import build_procedure_from_config as _build

    assert _build(AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path)), allocator=name), 8).max_rollouts == expected
    overridden = AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path)), allocator=name, max_rollouts=8)
    assert _build(overridden, 8).max_rollouts == 8

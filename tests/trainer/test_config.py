"""AdaptiveGRPOConfig: parses like any TRL config and rejects impossible settings with a message naming the fix."""

from __future__ import annotations

import dataclasses

import pytest
from datasets import Dataset
from helpers.trainer import build_trainer, make_dataset, reward_length, tiny_config_kwargs
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
        ({"max_rollouts": 3}, "min_rollouts <= num_generations <= max_rollouts must hold, .* and max_rollouts=3"),
        ({"min_rollouts": 5, "max_rollouts": 8}, "min_rollouts=5, num_generations=4 and max_rollouts=8"),
        (
            {"allocator": "knapsack", "allocator_kwargs": {"max_rollouts": 3}},
            "num_generations=4 and allocator_kwargs sets max_rollouts=3. num_generations is the average",
        ),
        ({"allocator_kwargs": "{not json"}, "allocator_kwargs is not valid JSON"),
        ({"num_generations": 1}, "at least 2 generations"),
        ({"prompt_id_column": "x", "success_rate_column": "x"}, "different names"),
        (
            {"allocator": "bayes_knapsack", "allocator_kwargs": {"fallback": True}},
            "['fallback']; it takes min_rollouts, max_rollouts, solver",
        ),
        ({"allocator": "uniform", "allocator_kwargs": '{"eta": 1}'}, "['eta']; it takes"),
        ({"posterior_half_life": 0}, "posterior_half_life=0: must be a finite number of steps > 0"),
        ({"posterior_half_life": -3.0}, "posterior_half_life=-3.0: must be a finite number of steps > 0"),
        ({"posterior_half_life": float("inf")}, "posterior_half_life=inf"),
        ({"posterior_prior_a": 0.0}, "posterior_prior_a=0.0: must be > 0"),
        ({"posterior_prior_b": -1.0}, "posterior_prior_b=-1.0: must be > 0"),
        ({"posterior_prior_a": float("nan")}, "posterior_prior_a=nan: must be finite"),
        (
            {"allocator": "uniform", "generation_token_budget": 1000.0},
            "generation_token_budget=1000.0 needs an allocator .* allocator='uniform' does not. Choose one of "
            "bayes_knapsack, knapsack",
        ),
        ({"allocator": "knapsack", "generation_token_budget": 0}, "generation_token_budget=0: must be"),
        ({"allocator": "knapsack", "generation_token_budget": float("inf")}, "generation_token_budget=inf"),
        ({"length_decay": 0.0}, "length_decay=0.0: must lie in (0, 1]"),
        ({"allocator": "knapsack", "generation_token_budget": "lots"}, "generation_token_budget='lots' is neither"),
    ],
)
def test_invalid_config_fails_at_construction(tmp_path, overrides, message):
    kwargs = tiny_config_kwargs(str(tmp_path))
    kwargs.update(overrides)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        AdaptiveGRPOConfig(**kwargs)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # strings are not booleans: bool("false") is True (min_rollouts="2" is refused the same way)
        ({"dynamic_sampling": "false"}, "dynamic_sampling='false': must be True or False (a string is not read"),
        ({"log_allocations": "false"}, "log_allocations='false': must be True or False"),
        ({"equal_prompt_weighting": "no"}, "equal_prompt_weighting='no': must be True or False"),
        # a token budget set twice, differently
        (
            {"allocator": "knapsack", "generation_token_budget": 200, "allocator_kwargs": {"token_budget": 100}},
            "generation_token_budget=200 but allocator_kwargs sets token_budget=100. Set it once",
        ),
        (
            {"allocator": "knapsack", "generation_token_budget": None, "allocator_kwargs": {"token_budget": 100}},
            "generation_token_budget=None but allocator_kwargs sets token_budget=100",
        ),
        # the constraint in the user's terms, blaming no field the user did not set
        (
            {"min_rollouts": 6},
            "min_rollouts <= num_generations <= max_rollouts must hold, but the config has min_rollouts=6, "
            "num_generations=4 and max_rollouts unset .* Lower min_rollouts to at most 4, or raise num_generations "
            "to at least 6",
        ),
        ({"prompt_id_column": 5}, "prompt_id_column=5: must be a non-empty column name (a str)"),
        ({"success_rate_column": None}, "success_rate_column=None: must be a non-empty column name"),
        (
            {"success_rate_prior_weight": float("inf")},
            "success_rate_prior_weight=inf: must be a finite number >= 0 (pseudo-observations",
        ),
        # Pilot-Commit: a pilot that leaves nothing to commit names the setting that works
        (
            {"allocator": "pilot_commit", "pilot_rollouts": 4},
            "pilot_rollouts=4 leaves nothing to commit: .* Set pilot_rollouts=2 (the config field, or "
            'allocator_kwargs={"pilot_rollouts": 2})',
        ),
        (
            {"allocator": "pilot_commit", "allocator_kwargs": {"pilot_rollouts": 4}},
            "pilot_rollouts=4 leaves nothing to commit",
        ),
        (
            {"allocator": "pilot_commit", "num_generations": 2},
            "Pilot-Commit needs num_generations >= 3",
        ),
        (
            {"allocator": "pilot_commit", "pilot_rollouts": 2, "allocator_kwargs": {"pilot_rollouts": 3}},
            "allocator_kwargs sets pilot_rollouts=3 but the config has pilot_rollouts=2. Set it once",
        ),
    ],
)
def test_what_a_new_user_got_wrong_fails_at_construction_naming_the_fix(tmp_path, overrides, message):
    kwargs = tiny_config_kwargs(str(tmp_path))
    kwargs.update(overrides)
    pattern = message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("{", r"\{")
    with pytest.raises(ValueError, match=pattern):
        AdaptiveGRPOConfig(**kwargs)


def test_following_the_rollout_bounds_advice_gives_a_config_that_builds(tmp_path):
    """min_rollouts=6 with num_generations=4: either fix the message names works (no second, different error)."""
    AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path), min_rollouts=4))
    AdaptiveGRPOConfig(
        **tiny_config_kwargs(
            str(tmp_path), min_rollouts=6, num_generations=6, generation_batch_size=12, per_device_train_batch_size=12
        )
    )


@pytest.mark.parametrize(("num_generations", "pilot"), [(4, 2), (8, 4), (16, 4), (3, 2)])
def test_pilot_commits_default_pilot_fits_the_batch(tmp_path, num_generations, pilot):
    """The paper's pilot of 4 where it leaves something to commit, else half the average (at least 2); the config
    field pilot_rollouts is pilot_commit's own pilot, as allocator_kwargs' is."""
    batch = 4 * num_generations
    common = tiny_config_kwargs(
        str(tmp_path), num_generations=num_generations, per_device_train_batch_size=batch, allocator="pilot_commit"
    )
    assert AdaptiveGRPOConfig(**common).build_procedure().pilot_rollouts == pilot
    if num_generations > 3:
        assert AdaptiveGRPOConfig(**common, pilot_rollouts=3).build_procedure().pilot_rollouts == 3
        assert (
            AdaptiveGRPOConfig(**common, allocator_kwargs={"pilot_rollouts": 3}).build_procedure().pilot_rollouts == 3
        )


def test_booleans_from_the_command_line_still_parse(tmp_path):
    parser = TrlParser(AdaptiveGRPOConfig)
    common = ["--output_dir", str(tmp_path), "--use_cpu", "true"]
    (args,) = parser.parse_args_into_dataclasses([*common, "--dynamic_sampling", "false", "--log_allocations", "no"])
    assert args.dynamic_sampling is False and args.log_allocations is False
    (args,) = parser.parse_args_into_dataclasses([*common, "--dynamic_sampling", "true"])
    assert args.dynamic_sampling is True


def test_indivisible_generation_batch_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="divisible"):
        AdaptiveGRPOConfig(
            **tiny_config_kwargs(str(tmp_path), generation_batch_size=10, per_device_train_batch_size=4)
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
        build_trainer(tiny_model_dir, tmp_path, dataset, reward_funcs=reward_length, allocator="uniform")


def test_unsupported_features_fail_at_construction(tiny_model_dir, tmp_path):
    with pytest.raises(TypeError, match="datasets.Dataset or datasets.IterableDataset"):
        build_trainer(tiny_model_dir, tmp_path, [{"prompt": "a"}], reward_funcs=reward_length, allocator="uniform")
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
        bounds = UniformAllocator(min_rollouts=5, max_rollouts=8)
        build_trainer(tiny_model_dir, tmp_path, None, bounds, reward_funcs=reward_length, allocator="uniform")


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


# ---------------------------------------------------------------------------------------------------------------------
# The statistics store's settings: Est's decayed rate, and warnings for settings the allocator does not read
# ---------------------------------------------------------------------------------------------------------------------
def test_est_settings_default_to_the_stores_and_reach_its_config(tmp_path):
    from trl_adaptive.stats import PromptStatistics

    default = AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path)), allocator="reinforce_ada_est")
    store = PromptStatistics()
    assert (default.est_decay, default.est_prior_alpha, default.est_prior_beta) == (
        store.decay,
        store.prior_alpha,
        store.prior_beta,
    )
    assert PromptStatistics(**default.statistics_config).config == store.config
    args = AdaptiveGRPOConfig(
        **tiny_config_kwargs(str(tmp_path)), allocator="reinforce_ada_est", est_decay=0.5, est_prior_beta=4.0
    )
    built = PromptStatistics(**args.statistics_config)
    assert (built.decay, built.prior_alpha, built.prior_beta) == (0.5, 1.0, 4.0)
    (parsed,) = TrlParser(AdaptiveGRPOConfig).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--allocator", "reinforce_ada_est", "--est_decay", "0.75", "--use_cpu", "1"]
    )
    assert parsed.est_decay == 0.75 and parsed.statistics_config["decay"] == 0.75


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"est_decay": 0.0}, "est_decay=0.0: must lie in (0, 1]; it multiplies Est's decayed counts"),
        ({"est_decay": 1.5}, "est_decay=1.5: must lie in (0, 1]; it multiplies Est's decayed counts"),
        ({"est_decay": float("nan")}, "est_decay=nan: must be finite"),
        ({"est_prior_alpha": 0.0}, "est_prior_alpha=0.0: must be > 0, a pseudo-success of Est's Beta prior"),
        ({"est_prior_beta": -1.0}, "est_prior_beta=-1.0: must be > 0, a pseudo-failure of Est's Beta prior"),
        ({"est_prior_beta": "16"}, "est_prior_beta='16': must be a real number"),
    ],
)
def test_invalid_est_settings_name_the_config_field(tmp_path, overrides, message):
    kwargs = tiny_config_kwargs(str(tmp_path), allocator="reinforce_ada_est", **overrides)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        AdaptiveGRPOConfig(**kwargs)


@pytest.mark.parametrize(
    ("allocator", "overrides", "readers"),
    [
        ("knapsack", {"est_decay": 0.5}, "reinforce_ada_est"),
        ("cero", {"est_prior_alpha": 2.0}, "reinforce_ada_est"),
        ("uniform", {"posterior_half_life": 8.0}, "bayes_knapsack, cero"),
        ("reinforce_ada_est", {"posterior_prior_a": 0.5}, "bayes_knapsack, cero"),
        ("reinforce_ada_seq_pos", {"est_decay": 0.5}, "reinforce_ada_est"),
    ],
)
def test_a_setting_the_allocator_does_not_read_is_warned_about(tmp_path, allocator, overrides, readers):
    (field,) = overrides
    with pytest.warns(UserWarning, match=rf"{field}=.* has no effect: allocator='{allocator}'") as record:
        AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path), allocator=allocator, **overrides))
    message = next(str(w.message) for w in record if "has no effect" in str(w.message))
    assert f"Allocators that read it: {readers}." in message and record[-1].filename == __file__


@pytest.mark.parametrize(
    ("allocator", "overrides"),
    [
        ("reinforce_ada_est", {"est_decay": 0.5, "est_prior_alpha": 2.0, "est_prior_beta": 8.0}),
        ("bayes_knapsack", {"posterior_half_life": 8.0, "posterior_prior_a": 0.5}),
        ("cero", {"posterior_prior_b": 0.5}),
        ("knapsack", {}),
    ],
)
def test_settings_the_allocator_reads_or_defaults_are_not_warned_about(tmp_path, allocator, overrides):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path), allocator=allocator, **overrides))


@pytest.mark.trainer
def test_the_trainer_builds_its_store_with_the_est_settings(tiny_model_dir, tmp_path):
    trainer = build_trainer(
        tiny_model_dir,
        tmp_path,
        reward_funcs=reward_length,
        allocator="reinforce_ada_est",
        est_decay=0.5,
        est_prior_beta=4.0,
    )
    store = trainer.prompt_statistics
    assert (store.decay, store.prior_alpha, store.prior_beta) == (0.5, 1.0, 4.0)


@pytest.mark.trainer
def test_the_default_allocator_is_the_learning_benchmarks_best(tiny_model_dir, tmp_path):
    """bayes_knapsack, chosen by docs/benchmarks.md#accuracy-per-token (build_trainer keeps knapsack for the suite)."""
    from trl_adaptive.allocation import BayesKnapsackAllocator, TokenBudgeted

    assert AdaptiveGRPOConfig(output_dir=str(tmp_path)).allocator == "bayes_knapsack"
    defaults = tiny_config_kwargs(str(tmp_path))
    trainer = AdaptiveGRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=reward_length,
        args=AdaptiveGRPOConfig(**defaults),
        train_dataset=make_dataset(),
    )
    assert isinstance(trainer.allocator, TokenBudgeted) and trainer.allocator.token_budget == "uniform"  # "auto"
    assert (
        isinstance(trainer.allocator.allocator, BayesKnapsackAllocator) and trainer.allocator.name == "bayes_knapsack"
    )


def _budget_of(allocator) -> float | str | None:
    """The token budget an allocator was built under (a TokenBudgeted wrapper's), None for a bare allocator."""
    return getattr(allocator, "token_budget", None)


@pytest.mark.parametrize("pilot", [0, 2])
def test_the_token_budget_reaches_the_allocator_and_the_length_decay_the_store(tmp_path, pilot):
    allocator = "bayes_knapsack" if pilot else "knapsack"
    kwargs = tiny_config_kwargs(str(tmp_path)) | {"allocator": allocator, "pilot_rollouts": pilot}
    args = AdaptiveGRPOConfig(**kwargs, generation_token_budget=640.0, length_decay=0.5)
    procedure = args.build_procedure()
    assert _budget_of(procedure.allocator) == 640.0 and type(procedure).__name__ == ("Pilot" if pilot else "PlanAhead")
    assert args.statistics_config["length_decay"] == 0.5
    assert _budget_of(AdaptiveGRPOConfig(**kwargs, generation_token_budget=None).build_procedure().allocator) is None


@pytest.mark.parametrize(
    "allocator, resolved",
    [
        ("bayes_knapsack", "uniform"),
        ("knapsack", "uniform"),
        ("uniform", None),
        ("cero", None),
        ("pilot_commit", None),
    ],
)
def test_the_default_token_budget_is_uniform_tokens_where_the_allocator_honours_one(tmp_path, allocator, resolved):
    args = AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path)), allocator=allocator)
    assert args.generation_token_budget == "auto" and args.token_budget == resolved
    assert _budget_of(args.build_procedure().allocator) == resolved


def test_an_explicit_token_budget_wins_over_auto(tmp_path):
    kwargs = tiny_config_kwargs(str(tmp_path)) | {"allocator": "knapsack"}
    assert (
        _budget_of(AdaptiveGRPOConfig(**kwargs, allocator_kwargs={"token_budget": None}).build_procedure().allocator)
        is None
    )
    assert AdaptiveGRPOConfig(**kwargs, allocator_kwargs={"token_budget": 900.0}).token_budget == 900.0
    assert AdaptiveGRPOConfig(**kwargs, generation_token_budget=None).token_budget is None


def test_the_token_budget_parses_from_the_command_line_as_a_number_or_uniform(tmp_path):
    parser = TrlParser(AdaptiveGRPOConfig)
    common = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--allocator", "knapsack"]
    (args,) = parser.parse_args_into_dataclasses([*common, "--generation_token_budget", "2048.5"])
    assert args.generation_token_budget == 2048.5 and _budget_of(args.build_procedure().allocator) == 2048.5
    (args,) = parser.parse_args_into_dataclasses([*common, "--generation_token_budget", "uniform"])
    assert _budget_of(args.build_procedure().allocator) == "uniform"
    (args,) = parser.parse_args_into_dataclasses([*common, "--generation_token_budget", "none"])
    assert args.generation_token_budget is None and _budget_of(args.build_procedure().allocator) is None
    (args,) = parser.parse_args_into_dataclasses(common)
    assert args.generation_token_budget == "auto" and _budget_of(args.build_procedure().allocator) == "uniform"


# ---------------------------------------------------------------------------------------------------------------------
# posterior_half_life: "auto" forgets in one epoch for bayes_knapsack (docs/benchmarks.md, "Do no harm")
# ---------------------------------------------------------------------------------------------------------------------
def test_the_default_half_life_is_one_epoch_for_bayes_knapsack_and_never_for_the_others(tmp_path):
    common = tiny_config_kwargs(str(tmp_path))  # 8 completions, G = 4: 2 prompts per generation batch
    default = AdaptiveGRPOConfig(**common)
    assert default.posterior_half_life == "auto" and default.resolved_half_life(128) == 64.0
    assert default.resolved_half_life(None) is None  # a stream: no epoch to measure
    assert AdaptiveGRPOConfig(**common, allocator="cero").resolved_half_life(128) is None
    epoch = AdaptiveGRPOConfig(**common, allocator="cero", posterior_half_life="epoch")
    assert epoch.statistics_config_for(10)["posterior_half_life"] == 5.0
    with pytest.raises(ValueError, match="posterior_half_life='epoch' needs training data with a length"):
        epoch.resolved_half_life(None)
    assert AdaptiveGRPOConfig(**common, posterior_half_life=None).resolved_half_life(128) is None
    parser = TrlParser(AdaptiveGRPOConfig)
    cli = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--posterior_half_life"]
    assert [parser.parse_args_into_dataclasses([*cli, v])[0].posterior_half_life for v in ("epoch", "none", "3")] == [
        "epoch",
        None,
        3.0,
    ]
    with pytest.raises(ValueError, match="posterior_half_life='weekly' is neither a number of generation batches"):
        AdaptiveGRPOConfig(**common, posterior_half_life="weekly")


@pytest.mark.trainer
def test_the_trainer_resolves_the_half_life_against_its_data_and_a_passed_stores(tiny_model_dir, tmp_path):
    from trl_adaptive.stats import PromptStatistics

    trainer = build_trainer(tiny_model_dir, tmp_path / "a", make_dataset(8), allocator="bayes_knapsack")
    assert trainer.prompt_statistics.posterior_half_life == 4.0  # 8 prompts, 2 per generation batch
    store = PromptStatistics(posterior_half_life=None)
    passed = {"statistics": store}
    kept = build_trainer(tiny_model_dir, tmp_path / "b", trainer_kwargs=passed, allocator="bayes_knapsack")
    assert kept.prompt_statistics is store  # "auto" takes the passed store's half-life
    with pytest.raises(ValueError, match="posterior_half_life=None, but the config has posterior_half_life=4.0"):
        build_trainer(
            tiny_model_dir,
            tmp_path / "c",
            make_dataset(8),
            allocator="bayes_knapsack",
            trainer_kwargs={"statistics": store},
            posterior_half_life="epoch",
        )

"""The trainer's prompt-source port (trainer/state.py): each batch trains the source's prompts, its state is
saved in adaptive_state.json and a resume mid-epoch composes exactly what the uninterrupted run composed; the config
names a source from the registry and refuses what cannot work, naming the field."""

from __future__ import annotations

import json

import pytest
from helpers.prompt_sources import LeastPickedPool
from helpers.trainer import build_trainer, make_dataset, tiny_config_kwargs
from trl import TrlParser

from trl_adaptive import AdaptiveGRPOConfig
from trl_adaptive.report.run_files import ADAPTIVE_STATE_FILE, ALLOCATION_LOG_FILE, read_allocation_log
from trl_adaptive.sampling.source import OfferedPrompts, PromptSource
from trl_adaptive.strategies import (
    build_prompt_source,
    prompt_source,
    register_prompt_source,
    registered_prompt_sources,
)

# 8 prompts, 2 per generation batch: 4 steps an epoch; a checkpoint at every step, the run ends mid-epoch 2
RUN = dict(prompt_source="test_least_picked", max_steps=6, save_strategy="steps", save_steps=1, max_rollouts=6)


def _train(model_dir, output_dir, resume=None):
    trainer = build_trainer(model_dir, output_dir, **RUN)
    trainer.train(resume_from_checkpoint=resume)
    records = read_allocation_log(str(output_dir / ALLOCATION_LOG_FILE))
    return trainer, [(r["step"], r["prompt_ids"]) for r in records]


@pytest.mark.trainer
def test_batches_hold_the_sources_prompts_and_a_resume_mid_epoch_composes_the_same(tiny_model_dir, tmp_path):
    full, logged = _train(tiny_model_dir, tmp_path / "full")
    source = full.adaptive_state.prompt_source
    assert isinstance(source, LeastPickedPool)
    assert [ids for _, ids in logged] == [composed for _, composed in source._composed]  # the source's prompts
    assert any(set(offered) != set(composed) for offered, composed in source._composed)  # not the sampler's
    saved = json.loads((tmp_path / "full" / "checkpoint-2" / ADAPTIVE_STATE_FILE).read_text())
    assert saved["prompt_source"]["name"] == "test_least_picked" and saved["prompt_source"]["state"]["picked"]

    run_dir = tmp_path / "resumed"
    run_dir.mkdir()
    (tmp_path / "full" / "checkpoint-2").rename(run_dir / "checkpoint-2")  # mid-epoch 1: step 2 of 4
    resumed, resumed_logged = _train(tiny_model_dir, run_dir, resume=str(run_dir / "checkpoint-2"))
    assert resumed_logged[-4:] == logged[2:]  # the same prompts at every later step
    assert resumed.adaptive_state.prompt_source.own_state() == source.own_state()  # its state restored exactly
    assert resumed.prompt_statistics.state_dict() == full.prompt_statistics.state_dict()


@pytest.mark.trainer
def test_a_checkpoint_of_another_prompt_source_is_refused_naming_the_field(tiny_model_dir, tmp_path):
    trainer = build_trainer(tiny_model_dir, tmp_path, **{**RUN, "max_steps": 1})
    trainer.train()
    other = build_trainer(tiny_model_dir, tmp_path, max_steps=2, max_rollouts=6)
    with pytest.raises(ValueError, match="written with prompt_source 'test_least_picked' but this run uses 'sampler'"):
        other.load_adaptive_state(str(tmp_path / "checkpoint-1" / ADAPTIVE_STATE_FILE))


def test_a_pool_source_refuses_a_stream_and_a_pool_larger_than_the_data(tiny_model_dir, tmp_path):
    stream = make_dataset(8).to_iterable_dataset()
    with pytest.raises(ValueError, match="prompt_source='test_least_picked' draws candidates .* streaming"):
        build_trainer(tiny_model_dir, tmp_path, stream, prompt_source="test_least_picked", max_rollouts=6)
    with pytest.raises(ValueError, match=r"pool_factor=9 must be an integer in \[1, 8\]"):
        build_trainer(
            tiny_model_dir, tmp_path, prompt_source="test_least_picked", prompt_source_kwargs={"pool_factor": 9}
        )


# -- the registry and the config fields --------------------------------------------------------------------------
def test_the_registry_resolves_names_and_refuses_what_is_not_a_source():
    assert {"sampler", "test_least_picked"} <= set(registered_prompt_sources())
    assert prompt_source("sampler") is OfferedPrompts
    assert build_prompt_source("test_least_picked", {"pool_factor": 3}).pool_factor == 3
    with pytest.raises(ValueError, match="Unknown prompt_source 'nope'. Registered prompt sources: .*sampler"):
        prompt_source("nope")
    with pytest.raises(ValueError, match=r"takes no argument\(s\) \['pool'\]; it takes pool_factor"):
        build_prompt_source("test_least_picked", {"pool": 3})
    with pytest.raises(ValueError, match="must be a PromptSource subclass with a class attribute `name`"):
        register_prompt_source(PromptSource)

    class Impostor(OfferedPrompts):
        pass

    with pytest.raises(ValueError, match="'sampler' is already registered"):
        register_prompt_source(Impostor)


def test_the_config_fields_parse_from_the_command_line_and_are_checked(tmp_path):
    parser = TrlParser(AdaptiveGRPOConfig)
    (args,) = parser.parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--use_cpu", "1", "--prompt_source", "test_least_picked"]
        + ["--prompt_source_kwargs", '{"pool_factor": 3}']
    )
    assert args.prompt_source == "test_least_picked" and args.prompt_source_kwargs == {"pool_factor": 3}
    assert args.build_prompt_source().pool_factor == 3
    assert AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path))).prompt_source == "sampler"
    for fields, match in [
        ({"prompt_source": "nope"}, "Unknown prompt_source 'nope'"),
        ({"prompt_source_kwargs": "{bad"}, "prompt_source_kwargs is not valid JSON"),
        ({"prompt_source_kwargs": "[1]"}, "prompt_source_kwargs must be a dict"),
        ({"prompt_source_kwargs": {"pool_factor": 2}}, r"prompt_source='sampler' takes no argument\(s\)"),
    ]:
        with pytest.raises(ValueError, match=match):
            AdaptiveGRPOConfig(**tiny_config_kwargs(str(tmp_path)), **fields)

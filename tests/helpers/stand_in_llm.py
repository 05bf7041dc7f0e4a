"""An in-process stand-in for vLLM's offline ``LLM`` engine, for TRL's colocate mode on CPU (no vLLM, no GPU).

It has exactly the surface ``trl.generation.vllm_generation.VLLMGeneration`` (trl 1.16) touches in colocate mode:

- ``LLM(**kwargs)`` (``_init_vllm``): the kwargs are recorded; the tokenizer is loaded from ``model`` for its EOS id;
- ``llm.generate(prompts, sampling_params=..., use_tqdm=...)`` (``generate``): ``prompts`` are
  ``{"prompt_token_ids": ids}`` dicts; the result is a list of RequestOutput-like objects with ``prompt_token_ids``
  and ``outputs[k].token_ids`` / ``outputs[k].logprobs`` (a list of ``{token_id: Logprob(logprob, rank)}``), which
  is what ``generate`` and ``extract_logprobs`` read;
- ``llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights([(name, tensor)])`` and
  ``llm.reset_prefix_cache()`` (``sync_weights``);
- ``llm.sleep(level=)`` / ``llm.wake_up(tags=)`` (``vllm_enable_sleep_mode=True``);
- ``llm.llm_engine.model_config.max_model_len`` (GRPOTrainer's tool loop).

Completions are a deterministic function of the prompt (:func:`expected_completion`), so a completion attached to the
wrong row is visible. Like vLLM, the engine keeps its own copy of the model (loaded from ``model``), ``load_weights``
copies pushed tensors into it, and the returned logprobs are the real (temperature-scaled, i.e. vLLM's
``processed_logprobs``) logprobs of the completion tokens under the engine's current weights. So they equal the
trainer's own ``old_per_token_logps`` only if every weight sync arrived and each row's logprobs stay with the row.
Sleep level 2 discards the weights, as in vLLM: generating before they are pushed again raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

import torch


def expected_completion(prompt_ids: list[int], eos_token_id: int, max_tokens: int | None = None) -> list[int]:
    """The last three prompt tokens reversed, then EOS (cut to ``max_tokens``)."""
    completion = [int(t) for t in prompt_ids[-3:][::-1]] + [int(eos_token_id)]
    return completion if max_tokens is None else completion[:max_tokens]


@dataclass
class StandInSamplingParams:
    """vLLM's ``SamplingParams`` fields that TRL may pass; an unknown kwarg raises ``TypeError`` as in vLLM."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    structured_outputs: Any = None


@dataclass
class Logprob:
    """vLLM's ``Logprob`` (``vllm.logprobs.Logprob``)."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class GenerateCall:
    prompt_token_ids: list[list[int]]
    sampling_params: StandInSamplingParams
    use_tqdm: Any


class _StandInModel:
    """What ``model_runner.model`` is in vLLM: only ``load_weights`` is used by TRL's colocate sync."""

    def __init__(self, llm: StandInLLM) -> None:
        self._llm = llm

    def load_weights(self, weights) -> set[str]:
        if "weights" in self._llm.asleep:
            raise RuntimeError("load_weights() while the weights are asleep: wake_up(tags=['weights']) first")
        loaded = set()
        params = dict(self._llm.model.named_parameters())
        for name, tensor in weights:
            if name not in params:
                raise KeyError(f"vLLM model has no parameter {name!r}")
            with torch.no_grad():
                params[name].copy_(tensor)
            # TRL passes ``param.data`` (a live reference): clone, so a record shows what was pushed at that time.
            self._llm.current_load[name] = tensor.detach().clone()
            self._llm.discarded.discard(name)
            self._llm.events.append(("load_weights", name))
            loaded.add(name)
        return loaded


class StandInLLM:
    """Records everything TRL asks of vLLM's ``LLM``; ``instances`` collects every engine built (one per rank)."""

    instances: ClassVar[list[StandInLLM]] = []

    def __init__(self, model: str, **kwargs: Any) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.init_kwargs = {"model": model, **kwargs}
        self.eos_token_id = AutoTokenizer.from_pretrained(model).eos_token_id
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        self.asleep: set[str] = set()  # the tags (``weights``, ``kv_cache``) sleep() released and wake_up() restores
        self.discarded: set[str] = set()  # parameters sleep(level=2) threw away and no push has restored yet
        self.events: list[tuple] = []
        self.generate_calls: list[GenerateCall] = []
        self.weight_syncs: list[dict[str, torch.Tensor]] = []  # one dict per reset_prefix_cache (end of a sync)
        self.current_load: dict[str, torch.Tensor] = {}
        max_model_len = kwargs.get("max_model_len") or 512
        self.llm_engine = SimpleNamespace(
            model_executor=SimpleNamespace(
                driver_worker=SimpleNamespace(model_runner=SimpleNamespace(model=_StandInModel(self)))
            ),
            model_config=SimpleNamespace(max_model_len=max_model_len),
        )
        type(self).instances.append(self)

    def generate(self, prompts, sampling_params=None, use_tqdm=True, **kwargs: Any) -> list[SimpleNamespace]:
        if kwargs:
            raise TypeError(f"unexpected generate kwargs {sorted(kwargs)}")
        if not isinstance(sampling_params, StandInSamplingParams):
            raise TypeError(f"sampling_params must be SamplingParams, got {type(sampling_params).__name__}")
        if self.asleep or self.discarded:
            raise RuntimeError(
                f"generate() while asleep ({sorted(self.asleep)}) or with {len(self.discarded)} discarded parameters"
            )
        prompt_ids = [list(prompt["prompt_token_ids"]) for prompt in prompts]
        self.generate_calls.append(GenerateCall(prompt_ids, sampling_params, use_tqdm))
        self.events.append(("generate", len(prompt_ids), sampling_params.n))
        results = []
        for ids in prompt_ids:
            outputs = []
            for index in range(sampling_params.n):
                completion = expected_completion(ids, self.eos_token_id, sampling_params.max_tokens)
                logprobs = None
                if sampling_params.logprobs is not None:
                    values = self.completion_logprobs(ids, completion, sampling_params.temperature)
                    logprobs = [{t: Logprob(v, rank=1)} for t, v in zip(completion, values, strict=True)]
                outputs.append(
                    SimpleNamespace(index=index, token_ids=completion, logprobs=logprobs, finish_reason="stop")
                )
            results.append(SimpleNamespace(prompt_token_ids=ids, outputs=outputs, finished=True))
        return results

    @torch.no_grad()
    def completion_logprobs(self, prompt_ids: list[int], completion: list[int], temperature: float) -> list[float]:
        """Sampled-token logprobs of ``completion`` after ``prompt_ids`` under the engine's current weights."""
        input_ids = torch.tensor([prompt_ids + completion])
        logits = self.model(input_ids=input_ids).logits[0, len(prompt_ids) - 1 : -1] / temperature
        logps = torch.log_softmax(logits.float(), dim=-1)
        return logps.gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()

    def reset_prefix_cache(self) -> bool:
        self.events.append(("reset_prefix_cache",))
        self.weight_syncs.append(self.current_load)
        self.current_load = {}
        return True

    def sleep(self, level: int = 1) -> None:
        self.events.append(("sleep", level))
        self.asleep = {"weights", "kv_cache"}
        if level == 2:
            self.discarded = {name for name, _ in self.model.named_parameters()}
            with torch.no_grad():
                for param in self.model.parameters():
                    param.fill_(float("nan"))  # as good as gone

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.events.append(("wake_up", tuple(tags) if tags is not None else None))
        self.asleep -= {"weights", "kv_cache"} if tags is None else set(tags)

    def collective_rpc(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        self.events.append(("collective_rpc", method))
        return []

    def __getattr__(self, name: str) -> Any:
        # Anything TRL starts touching that the stand-in does not model fails loudly, naming the attribute.
        raise AttributeError(f"StandInLLM has no {name!r}: TRL's colocate code now uses a part of vLLM's LLM it lacks")


def fresh_stand_in_class() -> type[StandInLLM]:
    """A subclass with its own ``instances`` list, so tests do not see each other's engines."""
    return type("StandInLLM", (StandInLLM,), {"instances": []})

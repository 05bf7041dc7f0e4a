"""What GRPOTrainer's ``_generate_and_score_completions`` does around its ``_generate`` call, as our code.

TRL 1.16 keeps two blocks of that 600-line method outside any hook: the set-up of a batch's rows before ``_generate``
(environment pool and ``reset()``, per-rollout tool dicts, images into conversational prompts) and the tensors after it
(padding, the truncation mask, ``num_items_in_batch``, multimodal forward arguments, old and reference log-probs, the
vLLM importance-sampling correction and its metrics). A generation batch sampled in rounds needs the first per round
and the second once, for the completions it keeps, so both are here as functions of the trainer, copied from
trl 1.16.0's grpo_trainer.py with ``self`` renamed ``trainer`` and cut only at the seams named below. What lies
between them (``_generate``, ``_calculate_rewards``) and what they call (``_get_per_token_logps_and_entropies``) are
TRL's hooks, called, never re-entered.

When TRL moves: ``tests/test_trl_contract.py`` fails on a changed ``_generate_and_score_completions`` (it pins the
method's source digest); diff that method against this file, and docs/trainer.md lists every other TRL member the
trainer touches.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
from transformers import Trainer
from trl.data_utils import apply_chat_template, is_conversational, prepare_multimodal_messages
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import nanmax, nanmin, pad, use_adapter


def rollout_prompts(trainer: Any, inputs: list[dict[str, Any]]) -> tuple[list[Any], list[Any] | None]:
    """The prompts ``_generate`` is called with for these rows, and the rows' images (None without images): draws one
    environment per rollout from the pool and resets it, builds the per-rollout tool dicts, puts images into
    conversational prompts. TRL 1.16 ``_generate_and_score_completions``, from its first line to ``_generate``; sets
    ``trainer.environments``, ``_batch_environments`` and the tool dicts for this batch of rows, as TRL does. Talks to
    no other rank.
    """
    # `prompt` is optional only when an environment owns the data (e.g. a multi-environment routing dataset that
    # carries only an `environment` column); each rollout's `reset()` then supplies it. Default it here rather than
    # writing it back onto the row, so the placeholder stays out of the `reset()` kwargs built below, while every
    # prompt-derived check downstream (conversational detection, multimodal handling) stays consistent. Without an
    # environment, a missing `prompt` is a malformed dataset and must still fail fast.
    if trainer.environment_factories is not None:
        prompts = [x.get("prompt", [{"role": "user", "content": ""}]) for x in inputs]
    else:
        prompts = [x["prompt"] for x in inputs]

    # Resolve each example's environment and draw one reusable instance per rollout from the pool, creating more
    # only when this batch needs more concurrent instances of an environment than exist. `_batch_environments`
    # records each example's environment so `_tokenize_prompts` can render the matching tool schema.
    if trainer.environment_factories is not None:
        trainer._batch_environments = [x.get("environment") if trainer._multi_environment else None for x in inputs]
        if trainer._multi_environment:
            for name in set(trainer._batch_environments):
                if name not in trainer.environment_factories:
                    raise ValueError(
                        f"Example has `environment={name!r}`, which is not among the environments passed to "
                        f"`environment_factory`. Expected one of: {list(trainer.environment_factories)}."
                    )
        trainer.environments = []
        pool_cursor = {}  # how many instances of each environment have been handed out so far this batch
        for name in trainer._batch_environments:
            pool = trainer._environment_pool[name]
            index = pool_cursor.get(name, 0)
            if index == len(pool):
                pool.append(trainer.environment_factories[name]())
            pool_cursor[name] = index + 1
            trainer.environments.append(pool[index])

    # Build the per-rollout tool dicts for this batch: the standalone tools plus, for each rollout, the methods of
    # its environment. Done here (not at init) because each example's environment, hence its tools, is data-dependent.
    if trainer.tools:
        trainer._sync_tool_dicts = []
        trainer._async_tool_dicts = []
        for i in range(len(inputs)):
            methods = []
            if trainer.environments:
                environment = trainer.environments[i]
                methods = [
                    getattr(environment, member_name)
                    for member_name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
                    if member_name not in ("reset", "get_reward") and not member_name.startswith("_")
                ]
            sync_tool_dict, async_tool_dict = {}, {}
            for tool in trainer._standalone_tools + methods:
                if inspect.iscoroutinefunction(tool):
                    async_tool_dict[tool.__name__] = tool
                else:
                    sync_tool_dict[tool.__name__] = tool
            trainer._sync_tool_dicts.append(sync_tool_dict)
            trainer._async_tool_dicts.append(async_tool_dict)

    if trainer.environments:
        for i, (prompt, environment, x) in enumerate(zip(prompts, trainer.environments, inputs, strict=True)):
            # `environment` is a control field in multi-environment mode, so it is not forwarded to `reset`.
            reset_kwargs = {k: v for k, v in x.items() if k != "environment"} if trainer._multi_environment else x
            observation = environment.reset(**reset_kwargs)
            if observation is None:
                continue
            content = prompt[-1]["content"]
            if isinstance(observation, list) and isinstance(content, str):
                content = [{"type": "text", "text": content}]
            if isinstance(observation, str) and isinstance(content, list):
                observation = [{"type": "text", "text": observation}]
            # Rebuild the last message rather than mutating it in place, so the input example is left untouched.
            prompts[i] = prompt[:-1] + [{**prompt[-1], "content": content + observation}]

    if "images" in inputs[0]:
        images = [example.get("images") for example in inputs]
    elif "image" in inputs[0]:
        images = [[example.get("image")] if example.get("image") is not None else None for example in inputs]
    else:
        images = None
    # Transformers requires at least one image in the batch, otherwise it throws an error
    if images is not None and all(img_list == [] for img_list in images):
        images = None

    # If the prompts are conversational and the inputs contain images, we need to convert the prompts from
    # [{"role": "user", "content": "What color is the sky?"}] to
    # [{"role": "user", "content": [{"type": "image", "image": <Image>},
    #                               {"type": "text", "text": "What color is the sky?"}]}]
    if images is not None:
        if not is_conversational(inputs[0]):
            raise ValueError(
                "Multimodal training requires conversational prompts. It looks like the dataset contains "
                "non-conversational inputs, likely because a chat template was applied before passing the dataset "
                "to the trainer. Please provide the raw conversational prompts and let the trainer apply the chat "
                "template internally."
            )
        prompts = [
            prepare_multimodal_messages(prompt, images=image_list)
            for prompt, image_list in zip(prompts, images, strict=True)
        ]
    return prompts, images


def training_inputs(
    trainer: Any,
    generated: tuple,
    prompts: list[Any],
    dataset_images: list[Any] | None,
    environment_names: list[str | None] | None,
) -> tuple[dict[str, Any], list[Any] | None]:
    """The training dict of this rank's completions, without ``advantages``, and their images: TRL 1.16
    ``_generate_and_score_completions`` from the return of ``_generate`` to the reward computation, plus the vLLM
    importance-sampling metrics it logs at its end and its output dict.

    ``generated``: ``_generate``'s return value for these completions; ``prompts``: what each was generated from
    (:func:`rollout_prompts`); ``dataset_images``: the rows' images; ``environment_names``: each completion's
    environment (multi-environment tool schemas), in place of TRL's ``_batch_environments``. Every rank calls it
    together (it gathers ``num_items_in_batch`` and the metrics).
    """
    device = trainer.accelerator.device
    mode = "train"
    (
        prompt_ids_list,
        completion_ids_list,
        tool_mask_list,
        completions,
        sampling_per_token_logps_list,
        extra_fields,
        images,
        tool_images,
    ) = generated
    if images is None:
        images = dataset_images  # restore dataset images (rollout_func path returns None)

    # Convert lists of token IDs to padded tensors
    prompt_ids = [torch.tensor(ids) for ids in prompt_ids_list]
    prompt_mask = [torch.ones_like(ids, dtype=torch.long) for ids in prompt_ids]
    prompt_ids = pad(
        prompt_ids,
        padding_value=trainer._tokenizer.pad_token_id,
        padding_side="left",
        pad_to_multiple_of=trainer.pad_to_multiple_of,
    ).to(device=device)
    prompt_mask = pad(
        prompt_mask, padding_value=0, padding_side="left", pad_to_multiple_of=trainer.pad_to_multiple_of
    ).to(device=device)
    completion_ids = [torch.tensor(ids) for ids in completion_ids_list]
    completion_mask = [torch.ones_like(ids, dtype=torch.long) for ids in completion_ids]
    completion_ids = pad(
        completion_ids,
        padding_value=trainer._tokenizer.pad_token_id,
        padding_side="right",
        pad_to_multiple_of=trainer.pad_to_multiple_of,
    ).to(device=device)
    completion_mask = pad(
        completion_mask, padding_value=0, padding_side="right", pad_to_multiple_of=trainer.pad_to_multiple_of
    ).to(device=device)
    if sampling_per_token_logps_list is not None:
        # vLLM replaces a NaN token logprob with `None` (see `extract_logprobs`); map it back to NaN so the
        # tensor builds (`torch.tensor([..., None, ...])` raises "Could not infer dtype of NoneType"). The NaN
        # positions are neutralized in the importance-sampling ratio below so they contribute no correction.
        sampling_per_token_logps = [
            torch.tensor([float("nan") if x is None else x for x in logps]) for logps in sampling_per_token_logps_list
        ]
        sampling_per_token_logps = pad(
            sampling_per_token_logps,
            padding_value=0.0,
            padding_side="right",
            pad_to_multiple_of=trainer.pad_to_multiple_of,
        ).to(device=device)
    else:
        sampling_per_token_logps = None
    if tool_mask_list is not None:
        tool_mask = [torch.tensor(mask) for mask in tool_mask_list]
        tool_mask = pad(
            tool_mask, padding_value=1, padding_side="right", pad_to_multiple_of=trainer.pad_to_multiple_of
        ).to(device=device)
    else:
        tool_mask = None

    # If mask_truncated_completions is enabled, zero out truncated completions for attention and loss masking
    if trainer.mask_truncated_completions:
        eos_and_pad = [*trainer.eos_token_ids, trainer._tokenizer.pad_token_id]
        is_truncated = torch.tensor([ids[-1] not in eos_and_pad for ids in completion_ids_list], device=device)
        # Mask completion_mask for attention masking
        completion_mask = completion_mask * (~is_truncated).unsqueeze(1).int()
        # Also mask tool_mask for consistency in multi-turn training
        if tool_mask is not None:
            tool_mask = tool_mask * (~is_truncated).unsqueeze(1).int()

    loss_mask = completion_mask if tool_mask is None else completion_mask * tool_mask
    num_items_in_batch = trainer.accelerator.gather(loss_mask.sum()).sum()

    # Concatenate prompt_mask with completion_mask for logit computation
    prompt_completion_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P+C)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)  # (B, P+C)

    logits_to_keep = completion_ids.size(1)  # we only need to compute the logits for the completion tokens
    batch_size = trainer.args.per_device_train_batch_size

    num_images = [len(img_list) if img_list else 0 for img_list in images] if images is not None else None

    # Get forward_kwargs for models with multimodal inputs.
    # When tool images are present (from _tool_call_loop), use image_processor directly and build
    # mm_token_type_ids from prompt_completion_ids. Otherwise, use the full processor pipeline
    # which returns model-specific keys (image_sizes, pixel_attention_mask, etc.).
    if trainer.tools and any(imgs for imgs in tool_images) and trainer._is_vlm:
        flat_images = [img for img_list in images if img_list for img in img_list]
        image_inputs = trainer.processing_class.image_processor(images=flat_images, return_tensors="pt")
        image_inputs = Trainer._prepare_inputs(trainer, image_inputs)
        forward_kwargs = dict(image_inputs)
    elif images is not None:
        if trainer.environment_factories is not None:
            per_prompt_tools = [trainer._env_tools[name] for name in environment_names]
        else:
            per_prompt_tools = [trainer.tools] * len(prompts)
        prompts_text = [
            apply_chat_template(
                {"prompt": prompt}, trainer.processing_class, tools=tools, **trainer.chat_template_kwargs
            )["prompt"]
            for prompt, tools in zip(prompts, per_prompt_tools, strict=True)
        ]
        prompt_inputs = trainer.processing_class(images=images, text=prompts_text, padding=True, return_tensors="pt")
        prompt_inputs = Trainer._prepare_inputs(trainer, prompt_inputs)
        forward_kwargs = {k: v for k, v in prompt_inputs.items() if k not in ["input_ids", "attention_mask"]}
    else:
        forward_kwargs = {}

    # Recover LFM2-VL tile counts; the full processor drops row/column metadata.
    num_tiles = None
    if images is not None and "spatial_shapes" in forward_kwargs:
        image_info = trainer.processing_class.image_processor(
            images=images, return_tensors="pt", return_row_col_info=True
        )
        tiles_per_image = image_info["image_rows"] * image_info["image_cols"]
        if trainer.processing_class.image_processor.use_thumbnail:
            tiles_per_image = tiles_per_image + (tiles_per_image > 1).to(tiles_per_image.dtype)
        num_tiles = [group.sum().item() for group in torch.split(tiles_per_image, num_images)]
    # Same for InternVL, whose pixel_values is tile-indexed ([total_tiles, channels, height, width]).
    elif (
        images is not None
        and forward_kwargs["pixel_values"].ndim == 4
        and forward_kwargs["pixel_values"].size(0) != sum(num_images)
    ):
        num_patches = trainer.processing_class.image_processor(
            images=images, crop_to_patches=True, return_tensors="pt"
        )["num_patches"]
        num_tiles = [group.sum().item() for group in torch.split(num_patches, num_images)]

    # If token_type_ids are used, extend them with zeros for the completion part
    if "token_type_ids" in forward_kwargs:
        token_type_ids = forward_kwargs["token_type_ids"]
        if trainer.pad_to_multiple_of is not None:
            # Needed only with pad_to_multiple_of: otherwise prompt_ids and token_type_ids must have equal len
            padding_size = prompt_ids.size(1) - token_type_ids.size(1)
            if padding_size > 0:
                token_type_ids = torch.cat(
                    [token_type_ids.new_zeros((token_type_ids.size(0), padding_size)), token_type_ids], dim=1
                )
        forward_kwargs["token_type_ids"] = torch.cat(
            [token_type_ids, token_type_ids.new_zeros(completion_ids.shape)], dim=1
        )
    # If mm_token_type_ids are used, extend them with zeros for the completion part
    if "mm_token_type_ids" in forward_kwargs:
        mm_token_type_ids = forward_kwargs["mm_token_type_ids"]
        if trainer.pad_to_multiple_of is not None:
            # Needed only with pad_to_multiple_of: otherwise prompt_ids and mm_token_type_ids must have equal len
            padding_size = prompt_ids.size(1) - mm_token_type_ids.size(1)
            if padding_size > 0:
                mm_token_type_ids = torch.cat(
                    [mm_token_type_ids.new_zeros((mm_token_type_ids.size(0), padding_size)), mm_token_type_ids],
                    dim=1,
                )
        forward_kwargs["mm_token_type_ids"] = torch.cat(
            [mm_token_type_ids, mm_token_type_ids.new_zeros(completion_ids.shape)], dim=1
        )

    # For VLM tool images: build token type IDs from the full prompt_completion_ids.
    # This must happen AFTER the token_type_ids/mm_token_type_ids extension blocks above,
    # because our version already covers the full sequence (images are in the completion,
    # not just the prompt).
    if trainer.tools and any(imgs for imgs in tool_images) and trainer._is_vlm:
        mm_ids = torch.zeros_like(prompt_completion_ids)
        if trainer._image_pad_token_id is not None:
            mm_ids[prompt_completion_ids == trainer._image_pad_token_id] = 1
        if trainer._video_pad_token_id is not None:
            mm_ids[prompt_completion_ids == trainer._video_pad_token_id] = 2

        # Use the same key the model expects: token_type_ids for models like Gemma,
        # mm_token_type_ids for models like Qwen.
        image_grid_thw = forward_kwargs.get("image_grid_thw")
        if image_grid_thw is not None:
            forward_kwargs["mm_token_type_ids"] = mm_ids
        else:
            forward_kwargs["token_type_ids"] = mm_ids

        # Truncation safety (Qwen-style models with image_grid_thw only): if
        # max_completion_length truncated some image tokens, the number of image pad tokens
        # in input_ids won't match pixel_values features. Check per-sample and drop ALL
        # images for any sample with a mismatch (safe fallback).
        if image_grid_thw is not None and num_images is not None:
            merge_length = getattr(trainer.processing_class.image_processor, "merge_size", 2) ** 2
            img_offset = 0
            has_mismatch = False
            for b in range(mm_ids.shape[0]):
                sample_tokens = (mm_ids[b] == 1).sum().item()
                sample_features = 0
                for i in range(num_images[b]):
                    grid_idx = img_offset + i
                    if grid_idx < image_grid_thw.shape[0]:
                        sample_features += image_grid_thw[grid_idx].prod().item() // merge_length
                if sample_tokens != sample_features:
                    has_mismatch = True
                    break
                img_offset += num_images[b]

            if has_mismatch:
                # Drop all images: safer than partial trim which is error-prone
                forward_kwargs.pop("pixel_values", None)
                forward_kwargs.pop("image_grid_thw", None)
                mm_ids.zero_()
                forward_kwargs["mm_token_type_ids"] = mm_ids
                num_images = None

    # When gradient checkpointing is enabled with use_reentrant=True (non default), calling the model inside a
    # torch.no_grad() block triggers a harmless PyTorch warning ("None of the inputs have requires_grad=True").
    # Temporarily disable checkpointing to avoid this warning during inference.
    with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
        # If the generation and optimization steps are misaligned—i.e., if generation does not occur at the end of
        # a full optimizer step (when gradient_accumulation_steps is not a multiple of generate_every)—then the
        # samples may come from an earlier version of the model. In that case, we need to track old_per_token_logps
        # for importance sampling. If the steps are aligned, importance sampling isn't necessary and we set
        # old_per_token_logps to None.
        # When using vLLM, we always compute old_per_token_logps for importance sampling, it was shown that the
        # distribution mismatch between vLLM and the training model can be large and harm the training.
        generate_every = trainer.args.steps_per_generation * trainer.num_iterations  # generation frequency
        if trainer.args.gradient_accumulation_steps % generate_every != 0 or (
            trainer.use_vllm and trainer.vllm_importance_sampling_correction
        ):
            old_per_token_logps, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model,
                prompt_completion_ids,
                attention_mask,
                logits_to_keep,
                batch_size=batch_size,
                num_images=num_images,
                num_tiles=num_tiles,
                **forward_kwargs,  # may contain pixel_values, image_grid_thw, ...
            )
        else:
            old_per_token_logps = None

        # Compute the importance sampling ratio when using vLLM, to correct for potential distribution mismatch
        if trainer.use_vllm and trainer.vllm_importance_sampling_correction:
            mask = completion_mask if tool_mask is None else completion_mask * tool_mask
            per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask
            # Tokens whose sampling logprob was NaN (unavailable from vLLM) get a zero difference, so their
            # importance ratio is exactly 1 (no correction) rather than propagating NaN through the loss.
            per_token_logps_diff = torch.nan_to_num(per_token_logps_diff, nan=0.0)

            sequence_level_is = trainer.vllm_importance_sampling_mode in ["sequence_mask", "sequence_truncate"]
            if sequence_level_is:
                per_sequence_logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)
                logps_diff = per_sequence_logps_diff
            else:
                logps_diff = per_token_logps_diff

            vllm_importance_sampling_ratio = torch.exp(logps_diff)

            # vllm_importance_sampling_ratio.shape:
            #   token_* modes:     (B, T)  (per-token ratio)
            #   sequence_* modes:  (B, 1)  (per-sequence ratio)

            if trainer.vllm_importance_sampling_mode in ["sequence_truncate", "token_truncate"]:
                vllm_importance_sampling_ratio = torch.clamp(
                    vllm_importance_sampling_ratio,
                    min=trainer.vllm_importance_sampling_clip_min,
                    max=trainer.vllm_importance_sampling_clip_max,
                )
            elif trainer.vllm_importance_sampling_mode in ["sequence_mask", "token_mask"]:
                min_val = (
                    trainer.vllm_importance_sampling_clip_min
                    if trainer.vllm_importance_sampling_clip_min is not None
                    else -math.inf
                )
                max_val = (
                    trainer.vllm_importance_sampling_clip_max
                    if trainer.vllm_importance_sampling_clip_max is not None
                    else math.inf
                )

                invalid_mis_mask = (vllm_importance_sampling_ratio < min_val) | (
                    vllm_importance_sampling_ratio > max_val
                )
                vllm_importance_sampling_ratio = vllm_importance_sampling_ratio.masked_fill(
                    invalid_mis_mask, value=0.0
                )
            else:
                raise ValueError(
                    f"Unknown vLLM importance sampling level: {trainer.vllm_importance_sampling_mode}. Possible "
                    "values are 'token_truncate', 'token_mask', 'sequence_truncate', and 'sequence_mask'."
                )

        # Compute the per-token log probabilities for the reference model
        if trainer.beta != 0.0:
            if trainer.ref_model is not None:
                ref_per_token_logps, _, _ = trainer._get_per_token_logps_and_entropies(
                    trainer.ref_model,
                    prompt_completion_ids,
                    attention_mask,
                    logits_to_keep,
                    batch_size=batch_size,
                    num_images=num_images,
                    num_tiles=num_tiles,
                    **forward_kwargs,  # may contain pixel_values, image_grid_thw, ...
                )
            else:
                # When training a PEFT adapter, how we obtain the reference depends on the setup:
                # - New adapter: disabling adapters yields the base model.
                # - Re-training an existing adapter: an initial copy is loaded under the name "ref".
                model = trainer.accelerator.unwrap_model(trainer.model)
                with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                    ref_per_token_logps, _, _ = trainer._get_per_token_logps_and_entropies(
                        trainer.model,
                        prompt_completion_ids,
                        attention_mask,
                        logits_to_keep,
                        batch_size=batch_size,
                        num_images=num_images,
                        num_tiles=num_tiles,
                        **forward_kwargs,  # may contain pixel_values, image_grid_thw, ...
                    )
        else:
            ref_per_token_logps = None

    if trainer.use_vllm and trainer.vllm_importance_sampling_correction:
        delta = torch.abs(old_per_token_logps - sampling_per_token_logps)
        mask = completion_mask.bool() if tool_mask is None else (completion_mask * tool_mask).bool()
        # Tokens vLLM could not score carry NaN, so exclude them rather than let them turn the reported
        # divergence into NaN. Counting them as zero instead would understate the divergence.
        delta = delta[mask & ~torch.isnan(delta)]
        mean_delta = torch.mean(delta) if delta.numel() > 0 else torch.tensor(0.0, device=device)
        max_delta = torch.max(delta) if delta.numel() > 0 else torch.tensor(0.0, device=device)
        trainer._metrics[mode]["sampling/sampling_logp_difference/mean"].append(
            trainer.accelerator.gather(mean_delta).mean().item()
        )
        trainer._metrics[mode]["sampling/sampling_logp_difference/max"].append(
            trainer.accelerator.gather(max_delta).max().item()
        )
        if sequence_level_is:
            flat_is_ratio = vllm_importance_sampling_ratio.flatten()
        else:
            flat_is_ratio = vllm_importance_sampling_ratio[mask]

        min_importance_sampling_ratio = (
            torch.min(flat_is_ratio) if flat_is_ratio.numel() > 0 else torch.tensor(0.0, device=device)
        )
        mean_importance_sampling_ratio = (
            torch.mean(flat_is_ratio) if flat_is_ratio.numel() > 0 else torch.tensor(0.0, device=device)
        )
        max_importance_sampling_ratio = (
            torch.max(flat_is_ratio) if flat_is_ratio.numel() > 0 else torch.tensor(0.0, device=device)
        )
        trainer._metrics[mode]["sampling/importance_sampling_ratio/min"].append(
            nanmin(trainer.accelerator.gather(min_importance_sampling_ratio)).item()
        )
        trainer._metrics[mode]["sampling/importance_sampling_ratio/mean"].append(
            trainer.accelerator.gather(mean_importance_sampling_ratio).nanmean().item()
        )
        trainer._metrics[mode]["sampling/importance_sampling_ratio/max"].append(
            nanmax(trainer.accelerator.gather(max_importance_sampling_ratio)).item()
        )

    output = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": None,  # the caller's, over the real groups (TRL's place in the dict)
        "num_items_in_batch": num_items_in_batch,
    }
    if old_per_token_logps is not None:
        output["old_per_token_logps"] = old_per_token_logps
    if trainer.use_vllm and trainer.vllm_importance_sampling_correction:
        output["importance_sampling_ratio"] = vllm_importance_sampling_ratio
    if sampling_per_token_logps is not None:
        output["sampling_per_token_logps"] = sampling_per_token_logps
    if ref_per_token_logps is not None:
        output["ref_per_token_logps"] = ref_per_token_logps
    if "pixel_values" in forward_kwargs:
        output["pixel_values"] = forward_kwargs["pixel_values"]
    if "image_grid_thw" in forward_kwargs:
        output["image_grid_thw"] = forward_kwargs["image_grid_thw"]
    if "pixel_attention_mask" in forward_kwargs:
        output["pixel_attention_mask"] = forward_kwargs["pixel_attention_mask"]
    if "spatial_shapes" in forward_kwargs:
        output["spatial_shapes"] = forward_kwargs["spatial_shapes"]
    if "image_sizes" in forward_kwargs:
        output["image_sizes"] = forward_kwargs["image_sizes"]
    if "token_type_ids" in forward_kwargs:
        output["token_type_ids"] = forward_kwargs["token_type_ids"]
    if "mm_token_type_ids" in forward_kwargs:
        output["mm_token_type_ids"] = forward_kwargs["mm_token_type_ids"]
    if "image_position_ids" in forward_kwargs:
        output["image_position_ids"] = forward_kwargs["image_position_ids"]
    if images is not None:
        output["num_images"] = num_images
        if num_tiles is not None:
            output["num_tiles"] = num_tiles
    if tool_mask is not None:
        output["tool_mask"] = tool_mask
    return output, images

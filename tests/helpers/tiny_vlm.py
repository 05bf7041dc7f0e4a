"""Build a tiny LLaVA (vision-language model) and its processor offline (no Hub), in about a second.

The processor's parts are built from defaults: a byte-level BPE tokenizer trained like ``tiny_model.py``'s, with
LLaVA's ``<image>`` token added, and LLaVA's PIL image processor shrunk to 28x28 crops (two 14x14 patches a side:
four image tokens per image, whatever the image's size).

Why LLaVA and not Qwen2-VL (what TRL's own tests use): transformers 5 builds a Qwen2-VL processor only with its video
processor, which needs torchvision; this environment has no torchvision. LLaVA's processor is image-only.
"""

from __future__ import annotations

from pathlib import Path

from .tiny_model import byte_level_tokenizer

# An image part renders as <image>; the processor expands it into one token per image feature.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>", "<image>"]
CORPUS = [
    "What is in picture 3? A red square.",
    "Describe the image: a small grey tile, 28 by 28 pixels.",
    "The quick brown fox jumps over the lazy dog 0123456789.",
    "How many colours does this picture have? One.",
]
IMAGE_SIZE, PATCH_SIZE = 28, 14  # every image is resized and cropped to IMAGE_SIZE a side


# long: the tokenizer, processor and both towers' configs are spelled out in one place, as a model card would
def build_tiny_vlm(output_dir: str | Path, seed: int = 0) -> Path:
    """Write a LLaVA (Qwen2 text model: 1 layer, hidden 32; CLIP vision tower: 1 layer, hidden 32) and its processor
    to ``output_dir``; return the path."""
    import torch
    from transformers import (
        GenerationConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaImageProcessorPil,
        LlavaProcessor,
    )

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = byte_level_tokenizer(CORPUS, SPECIAL_TOKENS, vocab_size=384)
    image_processor = LlavaImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",  # drop the CLS feature: (28 / 14)^2 = 4 image tokens
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(output_dir)

    torch.manual_seed(seed)
    config = LlavaConfig(
        text_config={
            "model_type": "qwen2",
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": 512,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": None,
        },
        vision_config={
            "model_type": "clip_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": IMAGE_SIZE,
            "patch_size": PATCH_SIZE,
            "projection_dim": 32,
        },
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        image_seq_length=(IMAGE_SIZE // PATCH_SIZE) ** 2,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,  # the tower has one layer
        tie_word_embeddings=True,
    )
    model = LlavaForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(output_dir)
    return output_dir


if __name__ == "__main__":
    import sys

    print(build_tiny_vlm(sys.argv[1]))

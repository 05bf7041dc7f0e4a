"""Build a tiny Qwen2 causal LM and a byte-level BPE tokenizer offline (no Hub), in about a second."""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
# Tool calling: the tokens of TRL's Qwen3 template, which TRL knows how to parse responses of.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
CORPUS = [
    "What is 2 + 3? The answer is 5.",
    "Solve for x: x * 7 = 42, so x = 6.",
    "The quick brown fox jumps over the lazy dog 0123456789.",
    "Compute the sum of the first ten integers: 55.",
]


def byte_level_tokenizer(corpus: list[str], special_tokens: list[str], vocab_size: int):
    """A byte-level BPE trained on ``corpus`` (every byte encodable), left padding, ``<|im_end|>`` as end of turn."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special_tokens, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        unk_token=None,
        padding_side="left",
    )


def build_tiny_model(output_dir: str | Path, seed: int = 0, tool_calling: bool = False) -> Path:
    """Write a 2-layer Qwen2 (about 30k parameters) and its tokenizer to ``output_dir``; return the path.

    ``tool_calling=True``: the tokenizer also has the tool-call tokens and TRL's Qwen3 chat template, so
    ``GRPOTrainer(tools=...)`` can render tools and parse tool calls offline.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = byte_level_tokenizer(CORPUS, SPECIAL_TOKENS + (TOOL_TOKENS if tool_calling else []), vocab_size=376)
    tokenizer.chat_template = CHAT_TEMPLATE
    if tool_calling:
        import trl

        tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    tokenizer.save_pretrained(output_dir)

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096 if tool_calling else 512,  # a rendered tool schema is long
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(output_dir)
    return output_dir


if __name__ == "__main__":
    import sys

    print(build_tiny_model(sys.argv[1]))

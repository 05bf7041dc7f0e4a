"""Write docs/configuration.md from AdaptiveGRPOConfig: every field it adds to TRL's GRPOConfig, with its flag,
default, help text (``metadata["help"]``) and docstring entry.

    python tools/write_config_doc.py           # regenerate docs/configuration.md
    python tools/write_config_doc.py --check   # exit 1 when the file is stale (tests/test_config_doc.py does this)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path
from typing import Any

DOC_PATH = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
COMMAND = "python tools/write_config_doc.py"


def adaptive_config_fields() -> list[dict[str, Any]]:
    """The fields AdaptiveGRPOConfig adds to GRPOConfig: name, type, default, CLI help and docstring paragraph."""
    from trl import GRPOConfig

    from trl_adaptive.trainer.config import AdaptiveGRPOConfig

    inherited = {f.name for f in dataclasses.fields(GRPOConfig)}
    doc = docstring_entries(AdaptiveGRPOConfig.__doc__ or "")
    # Resolved here because HfArgumentParser replaces the string annotations of dataclass fields in place.
    hints = typing.get_type_hints(AdaptiveGRPOConfig)
    fields = []
    for f in dataclasses.fields(AdaptiveGRPOConfig):
        if f.name in inherited:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        fields.append(
            {
                "name": f.name,
                "type": _type_name(hints.get(f.name, f.type)),
                "default": default,
                "help": f.metadata.get("help", ""),
                "doc": doc.get(f.name, ""),
            }
        )
    return fields


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def docstring_entries(docstring: str) -> dict[str, str]:
    """``name (`type`, ...):`` entries of a TRL-style config docstring -> their (unwrapped) description."""
    entries: dict[str, str] = {}
    current: str | None = None
    for line in docstring.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped and indent == 4 and " (`" in stripped and stripped.endswith(":"):
            current = stripped.split(" (`", 1)[0]
            entries[current] = ""
        elif current is not None and stripped and indent >= 8:
            entries[current] = (entries[current] + " " + stripped).strip()
        elif current is not None and stripped and indent < 8:
            current = None
    return entries


def configuration_markdown() -> str:
    """The text of docs/configuration.md."""
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from AdaptiveGRPOConfig by tools/write_config_doc.py; do not edit by hand.",
        f"     Regenerate: {COMMAND} -->",
        "",
        "`AdaptiveGRPOConfig` is TRL's `GRPOConfig` (every field, same meaning, see the",
        "[GRPOTrainer docs](https://huggingface.co/docs/trl/grpo_trainer)) plus the fields below. One exception of",
        "meaning: `num_generations` is the **average** number of completions per prompt; a generation batch holds",
        "`generation_batch_size` completions (the budget) over `generation_batch_size / num_generations` prompts.",
        "",
        "Every field is also a command-line flag of `examples/train_dapo.py` (and of any `TrlParser` script) and a",
        "key of a `--config` YAML recipe.",
        "",
        "| field | flag | default | help |",
        "|---|---|---|---|",
    ]
    fields = adaptive_config_fields()
    for f in fields:
        help_text = f["help"].replace("|", r"\|")
        lines.append(f"| `{f['name']}` | `--{f['name']}` | `{f['default']!r}` | {help_text} |")
    lines.append("")
    for f in fields:
        lines += [f"## `{f['name']}`", "", f"Type `{f['type']}`, default `{f['default']!r}`.", ""]
        if f["doc"]:
            lines += [f["doc"], ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the file is up to date")
    args = parser.parse_args(argv)
    text = configuration_markdown()
    if args.check:
        stale = not DOC_PATH.is_file() or DOC_PATH.read_text(encoding="utf-8") != text
        print(f"{DOC_PATH} is stale: run `{COMMAND}`" if stale else f"{DOC_PATH} is up to date")
        return 1 if stale else 0
    DOC_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {DOC_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

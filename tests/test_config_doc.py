"""docs/configuration.md is generated from AdaptiveGRPOConfig by tools/write_config_doc.py and must be up to date."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from helpers import REPO

from trl_adaptive import AdaptiveGRPOConfig

TOOL = REPO / "tools" / "write_config_doc.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("write_config_doc", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_doc_is_generated_from_the_config(tool):
    from trl import TrlParser

    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    stale = "docs/configuration.md is stale: run `python tools/write_config_doc.py`"
    assert text == tool.configuration_markdown(), stale
    TrlParser((AdaptiveGRPOConfig,))  # rewrites the dataclass fields' annotations in place: the doc must not change
    assert tool.configuration_markdown() == text
    fields = tool.adaptive_config_fields()
    assert [f["name"] for f in fields][:4] == ["allocator", "allocator_kwargs", "min_rollouts", "max_rollouts"]
    for field in fields:
        assert f"## `{field['name']}`" in text and f"`--{field['name']}`" in text
        assert field["help"], f"{field['name']} has no help text (metadata['help'])"
        assert field["doc"], f"{field['name']} has no entry in AdaptiveGRPOConfig's docstring"


def test_docstring_entries_are_unwrapped_per_field(tool):
    doc = "\n".join(
        [
            "A config.",
            "",
            "Parameters:",
            '    name (`str`, *optional*, defaults to `"x"`):',
            "        First line",
            "        and second line.",
            "    other (`int`):",
            "        One line.",
            "",
            "Text after the entries.",
            "    not (`an`, entry, no colon at the end)",
        ]
    )
    assert tool.docstring_entries(doc) == {"name": "First line and second line.", "other": "One line."}


def test_check_flag_reports_a_stale_file(tool, tmp_path, monkeypatch):
    stale = tmp_path / "configuration.md"
    stale.write_text("# Configuration reference\n\nout of date\n", encoding="utf-8")
    monkeypatch.setattr(tool, "DOC_PATH", stale)
    assert tool.main(["--check"]) == 1
    assert tool.main([]) == 0 and stale.read_text(encoding="utf-8") == tool.configuration_markdown()
    assert tool.main(["--check"]) == 0


def test_the_command_runs_from_the_repository_root():
    result = subprocess.run(
        [sys.executable, "tools/write_config_doc.py", "--check"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is up to date" in result.stdout

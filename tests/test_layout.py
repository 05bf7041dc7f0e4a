"""The package's layout rules hold (``tools/check_layout.py``): no module over 450 lines, no function over 60 lines
of code without a reason written next to it."""

from __future__ import annotations

import importlib.util

from helpers import REPO


def _check_layout():
    spec = importlib.util.spec_from_file_location("check_layout", REPO / "tools" / "check_layout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_package_layout():
    assert _check_layout().problems(REPO / "trl_adaptive") == []


def test_the_check_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    (tmp_path / "long.py").write_text(f"def f():\n{body}\n")
    (tmp_path / "reasoned.py").write_text(f"# long: a table written out\ndef f():\n{body}\n")
    found = _check_layout().problems(tmp_path)
    assert len(found) == 1 and "long.py:1: f has 61 lines of code" in found[0]

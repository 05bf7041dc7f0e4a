"""The package's layout holds: no module over 600 lines (``tools/check_layout.py``), and each layer imports no layer
above it."""

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


def test_the_check_finds_a_long_module_and_no_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(200))
    (tmp_path / "long_function.py").write_text(f"def f():\n{body}\n")  # reads in one sitting: fine
    (tmp_path / "long_module.py").write_text("x = 1\n" * 601)
    found = _check_layout().problems(tmp_path)
    assert len(found) == 1 and "long_module.py: 601 lines (at most 600" in found[0]


# ---- the layers: who may import whom --------------------------------------------------------------------------------
# Each checked part of trl_adaptive and the parts it must never import, lazily inside a function included. The leaf
# (trl_adaptive.batch: the types stats, allocation and sampling share) may import only these helpers of the package.
FORBIDDEN = {
    "trl_adaptive.stats": (
        "trl_adaptive.allocation",
        "trl_adaptive.sampling",
        "trl_adaptive.strategies",
        "trl_adaptive.trainer",
        "trl_adaptive.sim",
    ),
    "trl_adaptive.allocation": (
        "trl_adaptive.sampling",
        "trl_adaptive.strategies",
        "trl_adaptive.trainer",
        "trl_adaptive.sim",
        "trl_adaptive.stats",
    ),
    # the generic sampling layer sits below the registry: it takes allocator objects, never names
    "trl_adaptive.sampling": ("trl_adaptive.strategies", "trl_adaptive.trainer", "trl_adaptive.sim"),
}
LEAF, LEAF_MAY_IMPORT = "trl_adaptive.batch", ("trl_adaptive._validate", "trl_adaptive._io")


def _module_name(path, root):
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path, root):
    """Every module ``path``'s code imports, anywhere in it (functions and ``TYPE_CHECKING`` blocks too): for
    ``from X import y`` both X and X.y (y may be a submodule), relative imports resolved; ``import_module("...")``
    calls with a literal name count too."""
    import ast

    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            target = ".".join(part for part in (base, node.module) if part)
            found |= {target, *(f"{target}.{alias.name}" for alias in node.names)}
        elif (
            isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
        ):
            if node.args and isinstance(node.args[0], ast.Constant):
                found.add(node.args[0].value)
    return found


def _within(module, prefixes):
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _layer_breaches(root):
    """``(module, imported)`` for every import that breaks :data:`FORBIDDEN` or the leaf's rule, under ``root``
    (the folder holding the package ``trl_adaptive``)."""
    breaches = []
    for path in sorted((root / "trl_adaptive").rglob("*.py")):
        module = _module_name(path, root)
        for imported in sorted(_imports(path, root)):
            if module == LEAF:
                bad = _within(imported, ("trl_adaptive",)) and not _within(imported, LEAF_MAY_IMPORT)
            else:
                bad = any(_within(module, [part]) and _within(imported, banned) for part, banned in FORBIDDEN.items())
            if bad:
                breaches.append((module, imported))
    return breaches


def test_stats_allocation_sampling_and_the_leaf_import_no_layer_above_them():
    assert (REPO / "trl_adaptive" / "batch.py").exists()
    assert _layer_breaches(REPO) == []


def test_the_import_walk_sees_every_kind_of_import(tmp_path):
    found = _imports(REPO / "trl_adaptive" / "allocation" / "base.py", REPO)
    assert {"trl_adaptive.batch", "trl_adaptive._validate.check_int"} <= found
    package = tmp_path / "trl_adaptive"
    for folder in ("stats", "allocation", "sampling"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "batch.py").write_text("from ._validate import check_int\nfrom .stats import store\n")
    (package / "stats" / "__init__.py").write_text("def f():\n    from .. import sampling\n")
    (package / "stats" / "late.py").write_text("import importlib\nimportlib.import_module('trl_adaptive.sim.run')\n")
    (package / "allocation" / "ok.py").write_text("from ..batch import Allocation\nfrom . import base\n")
    (package / "allocation" / "bad.py").write_text("if True:\n    from ..stats.store import PromptStatistics\n")
    (package / "sampling" / "ok.py").write_text("from ..allocation import base\nfrom ..stats import store\n")
    (package / "sampling" / "bad.py").write_text("def f():\n    from ..strategies import get_allocator\n")
    assert _layer_breaches(tmp_path) == [
        ("trl_adaptive.allocation.bad", "trl_adaptive.stats.store"),
        ("trl_adaptive.allocation.bad", "trl_adaptive.stats.store.PromptStatistics"),
        ("trl_adaptive.batch", "trl_adaptive.stats"),
        ("trl_adaptive.batch", "trl_adaptive.stats.store"),
        ("trl_adaptive.sampling.bad", "trl_adaptive.strategies"),
        ("trl_adaptive.sampling.bad", "trl_adaptive.strategies.get_allocator"),
        ("trl_adaptive.stats", "trl_adaptive.sampling"),
        ("trl_adaptive.stats.late", "trl_adaptive.sim.run"),
    ]

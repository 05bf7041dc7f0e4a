"""Check the package's layout rules: no module over 450 lines, no function over 60 lines of code.

A function may be longer when the reason is written next to it: a comment ``# long: <why>`` on the line of its
``def`` or the line above. Lines of code exclude blank lines, comment lines and the docstring.

    python tools/check_layout.py            # trl_adaptive/
    python tools/check_layout.py some/dir   # another tree
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_MODULE_LINES = 450
MAX_FUNCTION_CODE_LINES = 60


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    body = node.body
    skip: set[int] = set()
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        if isinstance(body[0].value.value, str):
            skip.update(range(body[0].lineno, body[0].end_lineno + 1))
    start = node.body[0].lineno
    count = 0
    for number in range(start, node.end_lineno + 1):
        text = lines[number - 1].strip()
        if number in skip or not text or text.startswith("#"):
            continue
        count += 1
    return count


def _has_reason(node: ast.AST, lines: list[str]) -> bool:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    around = lines[max(first - 2, 0) : node.lineno]
    return any("# long:" in line for line in around)


def problems(root: Path) -> list[str]:
    """Every breach of the layout rules under ``root``, one readable line each."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        if len(lines) > MAX_MODULE_LINES:
            found.append(f"{path}: {len(lines)} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = _code_lines(node, lines)
                if n > MAX_FUNCTION_CODE_LINES and not _has_reason(node, lines):
                    found.append(
                        f"{path}:{node.lineno}: {node.name} has {n} lines of code (at most "
                        f"{MAX_FUNCTION_CODE_LINES}, or a '# long: <why>' comment next to its def)"
                    )
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "trl_adaptive"
    found = problems(root)
    print("\n".join(found) or "layout OK")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Check the package's one layout guide: no module over 600 lines.

A module holds one idea read in one sitting; a batch module of 400-600 lines that reads top to bottom beats eight
fragments, so there is no limit on a function's length (it cut the trainer into pieces). Past 600 lines a module
usually holds two ideas: split it by what the parts do.

    python tools/check_layout.py            # trl_adaptive/
    python tools/check_layout.py some/dir   # another tree
"""

from __future__ import annotations

import sys
from pathlib import Path

MAX_MODULE_LINES = 600


def problems(root: Path) -> list[str]:
    """Every module under ``root`` over the guide, one readable line each."""
    found = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().splitlines()
        if len(lines) > MAX_MODULE_LINES:
            found.append(f"{path}: {len(lines)} lines (at most {MAX_MODULE_LINES}: split it by what its parts do)")
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "trl_adaptive"
    found = problems(root)
    print("\n".join(found) or "layout OK")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

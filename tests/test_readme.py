"""The README's allocator example runs as written (documentation that cannot silently rot)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_allocator_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    (example,) = [b for b in blocks if "KnapsackAllocator" in b]
    namespace: dict = {}
    exec(compile(example, str(README), "exec"), namespace)  # noqa: S102 - our own README
    assert namespace["counts"].sum() == 48

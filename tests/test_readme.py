"""The README's examples run as written (documentation that cannot silently rot)."""

import re

import pytest
from helpers import REPO

README = REPO / "README.md"


def test_readme_allocator_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    (example,) = [b for b in blocks if "KnapsackAllocator" in b]
    namespace: dict = {}
    exec(compile(example, str(README), "exec"), namespace)  # noqa: S102 - our own README
    assert namespace["counts"].sum() == 48


@pytest.mark.trainer
def test_readme_training_example_runs_with_a_local_model(tiny_model_dir, tmp_path, monkeypatch):
    """The README's training example, as written, with the model name replaced by a local path (as a user would)."""
    readme = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    (example,) = [b for b in blocks if "AdaptiveGRPOTrainer(" in b]
    model_name = re.search(r'model="([^"]+)"', example).group(1)
    example = example.replace(model_name, str(tiny_model_dir))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    assert len(namespace["trainer"].train_dataset["success_rate"]) == len(namespace["dataset"])

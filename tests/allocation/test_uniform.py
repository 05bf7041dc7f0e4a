"""UniformAllocator (trl_adaptive/allocation/uniform.py): GRPO's fixed group size."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_adaptive.allocation import UniformAllocator
from trl_adaptive.strategies import get_allocator

rate = st.sampled_from([float("nan"), 0.0, 1.0]) | st.floats(0.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(rates=st.lists(rate, min_size=1, max_size=64), data=st.data())
def test_counts_are_the_even_split_with_the_remainder_first(rates, data):
    num_prompts = len(rates)
    budget = data.draw(st.integers(2 * num_prompts, 128 * num_prompts))
    allocation = UniformAllocator().allocate(rates, budget)
    counts = allocation.counts
    assert counts.dtype == np.int64 and int(counts.sum()) == budget
    assert allocation.weights is None and allocation.budget == budget
    base, extra = divmod(budget, num_prompts)
    assert counts.tolist() == [base + 1] * extra + [base] * (num_prompts - extra)


@settings(max_examples=30, deadline=None)
@given(rates=st.lists(rate, min_size=1, max_size=16), num_generations=st.integers(2, 16))
def test_reproduces_grpo_and_ignores_rates(rates, num_generations):
    budget = len(rates) * num_generations
    counts = UniformAllocator().allocate(rates, budget).counts
    assert counts.tolist() == [num_generations] * len(rates)
    assert counts.tolist() == UniformAllocator().allocate([0.5] * len(rates), budget).counts.tolist()


def test_docstring_example_and_registry():
    assert UniformAllocator().allocate([0.1, float("nan"), 1.0], budget=8).counts.tolist() == [3, 3, 2]
    assert isinstance(get_allocator("uniform"), UniformAllocator)
    assert UniformAllocator().state_dict() == {}


def test_invalid_budget_and_bounds_raise():
    with pytest.raises(ValueError, match=r"budget=5 .*\[6, 384\]"):
        UniformAllocator().allocate([0.5] * 3, 5)
    with pytest.raises(ValueError, match=r"budget=13 .*\[6, 12\]"):
        UniformAllocator(max_rollouts=4).allocate([0.5] * 3, 13)
    with pytest.raises(ValueError, match="min_rollouts"):
        UniformAllocator(min_rollouts=1)
    with pytest.raises(ValueError, match="max_rollouts"):
        UniformAllocator(min_rollouts=4, max_rollouts=3)
    with pytest.raises(ValueError, match="non-empty"):
        UniformAllocator().allocate([], 0)

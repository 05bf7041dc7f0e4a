"""Pure allocation math: value functions, exact solvers and the allocation strategies. No torch, no trl."""

from .base import (
    Allocation,
    Allocator,
    PromptBatchStats,
    largest_remainder,
)
from .bayes_knapsack import BayesKnapsackAllocator, absorb, pilot_budget_check
from .cero import CeroAllocator
from .knapsack import KnapsackAllocator
from .reinforce_ada import ReinforceAdaEstAllocator
from .solvers import knapsack_objective, solve_dp, solve_greedy
from .status import STATUS_LABELS, STATUSES, prompts_per_status, status_index
from .token_budgeted import TokenBudgeted, with_token_budget
from .uniform import UniformAllocator
from .value import (
    expected_info_gain,
    expected_marginal_gains,
    expected_value_table,
    info_gain,
    marginal_gains,
    mixed_group_demand,
    prob_nonzero_gradient,
    value,
    value_table,
)

__all__ = [
    "Allocation",
    "Allocator",
    "BayesKnapsackAllocator",
    "CeroAllocator",
    "KnapsackAllocator",
    "PromptBatchStats",
    "ReinforceAdaEstAllocator",
    "TokenBudgeted",
    "UniformAllocator",
    "absorb",
    "expected_info_gain",
    "expected_marginal_gains",
    "expected_value_table",
    "info_gain",
    "knapsack_objective",
    "largest_remainder",
    "marginal_gains",
    "mixed_group_demand",
    "pilot_budget_check",
    "prob_nonzero_gradient",
    "STATUSES",
    "STATUS_LABELS",
    "prompts_per_status",
    "status_index",
    "solve_dp",
    "solve_greedy",
    "value",
    "value_table",
    "with_token_budget",
]

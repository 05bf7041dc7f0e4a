"""A procedure's state as one tree: its own state and, by attribute name, that of every procedure and allocator it
drives (``DynamicSampling.inner``, ``PlanAhead.allocator``, a user procedure's two allocators).

One node per object, JSON::

    {"type": "DynamicSampling", "state": {},
     "children": {"inner": {"type": "CeroPacing", "state": {},
                            "children": {"allocator": {"type": "CeroAllocator", "state": {"mu": 0.01, ...}}}}}}

A procedure's own state is :meth:`Procedure.own_state` (Pilot-Commit's evictions); an allocator's is its
``state_dict()``. Loading checks each node against the live object as it goes (a mismatch can leave earlier nodes
loaded: the trainer loads a copy first, ``persistence.restorable_state``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..allocation.base import Allocator


def children_of(owner: Any) -> dict[str, Any]:
    """The procedures and allocators ``owner`` holds in its public attributes, by name; those in a list, tuple or
    dict attribute are named ``attribute.index`` / ``attribute.key``."""
    found: dict[str, Any] = {}
    for name, value in vars(owner).items():
        if name.startswith("_"):
            continue
        if isinstance(value, Mapping):
            found.update((f"{name}.{key}", item) for key, item in value.items() if _is_node(item))
        elif isinstance(value, list | tuple):
            found.update((f"{name}.{key}", item) for key, item in enumerate(value) if _is_node(item))
        elif _is_node(value):
            found[name] = value
    return found


def state_tree(node: Any) -> dict[str, Any]:
    """The JSON state tree of a procedure or allocator."""
    if isinstance(node, Allocator):
        return {"type": type(node).__name__, "state": dict(node.state_dict())}
    tree: dict[str, Any] = {"type": type(node).__name__, "state": dict(node.own_state())}
    children = {name: state_tree(child) for name, child in children_of(node).items()}
    if children:
        tree["children"] = children
    return tree


def load_state_tree(node: Any, tree: Mapping[str, Any], where: str = "procedure") -> None:
    """Restore :func:`state_tree`'s output into ``node`` and what it holds; a ValueError naming the node at the first
    mismatch (type, a child missing or extra). A failure can leave part of the tree loaded: check on a copy first."""
    if not isinstance(tree, Mapping) or "type" not in tree:
        raise ValueError(f"{where}: expected a state tree node with a 'type', got {str(tree)[:80]}.")
    if tree["type"] != type(node).__name__:
        raise ValueError(
            f"{where} was saved as {tree['type']} but this run's is {type(node).__name__}; resume with the same "
            "allocator and sampling settings (allocator, pilot_rollouts, dynamic_sampling, allocator_kwargs)."
        )
    if isinstance(node, Allocator):
        node.load_state_dict(dict(tree.get("state", {})))
        return
    children, saved = children_of(node), dict(tree.get("children", {}))
    if set(children) != set(saved):
        raise ValueError(f"{where} holds {sorted(children)} but its saved state holds {sorted(saved)}.")
    node.load_own_state(dict(tree.get("state", {})))
    for name, child in children.items():
        load_state_tree(child, saved[name], f"{where}.{name}")


def _is_node(value: Any) -> bool:
    return isinstance(value, Allocator) or (hasattr(value, "own_state") and hasattr(value, "load_own_state"))


__all__ = ["children_of", "load_state_tree", "state_tree"]

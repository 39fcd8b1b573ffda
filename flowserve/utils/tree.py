"""Flatten nested inputs and outputs (tuples, lists, dicts, None) to tensor leaves and back."""

from __future__ import annotations

from flowserve.tensor import Tensor


def flatten(obj) -> tuple[list, object]:
    """``(leaves, spec)``: the tensors of ``obj`` in order, and its structure."""
    leaves: list = []

    def walk(x):
        if isinstance(x, Tensor):
            leaves.append(x)
            return ("leaf",)
        if isinstance(x, (list, tuple)):
            return (type(x).__name__, [walk(v) for v in x])
        if isinstance(x, dict):
            return ("dict", [(k, walk(v)) for k, v in x.items()])
        return ("const", x)

    return leaves, walk(obj)


def unflatten(spec, leaves: list):
    it = iter(leaves)

    def build(s):
        kind = s[0]
        if kind == "leaf":
            return next(it)
        if kind in ("list", "tuple"):
            items = [build(v) for v in s[1]]
            return items if kind == "list" else tuple(items)
        if kind == "dict":
            return {k: build(v) for k, v in s[1]}
        return s[1]

    return build(spec)


def leaf_names(spec, prefix: str = "output") -> list[str]:
    """Names of the leaves: dict keys where build() returned a dict, else ``output_N``."""
    names: list[str] = []

    def walk(s, path):
        kind = s[0]
        if kind == "leaf":
            names.append(path or f"{prefix}_{len(names)}")
        elif kind in ("list", "tuple"):
            for v in s[1]:
                walk(v, None)
        elif kind == "dict":
            for k, v in s[1]:
                walk(v, str(k))

    walk(spec, None)
    return names

"""``einsum`` as a composite: each operand is summed over the indices only it has, and
pairs of operands are contracted with one batched ``matmul`` (permute + reshape around it).
It needs no primitive, gradient or lowering of its own."""

from __future__ import annotations

import math
import string

from flowserve.errors import ShapeError
from flowserve.ops import core_functions
def _fail(equation: str, why: str):
    raise ShapeError(f"einsum expected {why}, got equation {equation!r}")


def parse(equation: str, operands: list) -> tuple[list[str], str]:
    """Input index strings and the output string, with ``...`` spelled out as letters."""
    equation = equation.replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(operands):
        _fail(equation, f"{len(operands)} operand terms")
    spare = [c for c in string.ascii_uppercase + string.ascii_lowercase if c not in equation]
    ell_ndim = 0
    for term, x in zip(inputs, operands):
        if "..." in term:
            ell_ndim = max(ell_ndim, x.ndim - len(term.replace("...", "")))
    ell = "".join(spare[:ell_ndim])
    terms = []
    for term, x in zip(inputs, operands):
        n = x.ndim - len(term.replace("...", "")) if "..." in term else 0
        term = term.replace("...", ell[ell_ndim - n:]) if "..." in term else term
        if len(term) != x.ndim or not term.isalpha():
            _fail(equation, f"a term of {x.ndim} letters for an operand of size {tuple(x.shape)}")
        if len(set(term)) != len(term):
            _fail(equation, "no index repeated within one operand (diagonals are not taken)")
        terms.append(term)
    if arrow:
        out = out.replace("...", ell)
    else:
        counts = {c: "".join(terms).count(c) for c in "".join(terms)}
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    if not set(out) <= set("".join(terms)) or len(set(out)) != len(out):
        _fail(equation, "output indices that appear once and in some input")
    return terms, out


def _sum_private(x, term: str, keep: set):
    """Sum ``x`` over the indices of ``term`` that are not in ``keep``."""
    axes = [i for i, c in enumerate(term) if c not in keep]
    if not axes:
        return x, term
    return core_functions.sum(x, axes), "".join(c for c in term if c in keep)


def _contract(a, ta: str, b, tb: str, keep: set, sizes: dict):
    """``a`` and ``b`` contracted over their shared indices not in ``keep``."""
    batch = [c for c in ta if c in tb and c in keep]
    summed = [c for c in ta if c in tb and c not in keep]
    left = [c for c in ta if c not in tb]
    right = [c for c in tb if c not in ta]
    a = core_functions.permute(a, [ta.index(c) for c in batch + left + summed])
    b = core_functions.permute(b, [tb.index(c) for c in batch + summed + right])
    n = [math.prod(sizes[c] for c in group) for group in (batch, left, summed, right)]
    out = core_functions.matmul(
        core_functions.reshape(a, (n[0], n[1], n[2])), core_functions.reshape(b, (n[0], n[2], n[3]))
    )
    term = "".join(batch + left + right)
    return core_functions.reshape(out, [sizes[c] for c in term]), term


def einsum(equation: str, operands: list):
    terms, out = parse(equation, operands)
    sizes: dict = {}
    for term, x in zip(terms, operands):
        for c, n in zip(term, x.shape):
            if sizes.setdefault(c, n) != n:
                _fail(equation, f"index {c!r} to have one size, not {sizes[c]} and {n}")
    xs = list(operands)
    for i, (x, term) in enumerate(zip(xs, terms)):
        others = set(out).union(*[set(t) for j, t in enumerate(terms) if j != i])
        xs[i], terms[i] = _sum_private(x, term, others)
    x, term = xs[0], terms[0]
    for i in range(1, len(xs)):
        keep = set(out).union(*[set(t) for t in terms[i + 1:]])
        x, term = _contract(x, term, xs[i], terms[i], keep, sizes)
        x, term = _sum_private(x, term, keep)
    return core_functions.permute(x, [term.index(c) for c in out]) if term != out else x

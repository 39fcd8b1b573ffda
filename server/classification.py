"""Triton's classification extension: an output requested with ``classification: N``
(tritonclient's ``InferRequestedOutput(name, class_count=N)``) comes back as the N
highest values of each batch row, or of the whole tensor for a model that does not
batch, as BYTES strings ``"<value>:<index>"`` ordered from the highest; N is cut to the
values there are, as Triton does. Labels (the spec's optional ``:<label>``) are not
served: a model carries none::

    top_classes(np.array([[1.1, 3.3, 0.5, 2.4]], np.float32), 2, batched=True)
    # array([[b'3.3:1', b'2.4:3']], dtype=object)
"""

from __future__ import annotations

import math

import numpy as np

from .errors import InvalidRequestError

UNORDERED = ("BOOL", "BYTES")  # datatypes whose values have no order to rank


def top_classes(array: np.ndarray, count: int, batched: bool) -> np.ndarray:
    """The ``count`` highest values of each row of ``array`` with their indices, as BYTES
    (shape ``[rows, count]``, or ``[count]`` when not ``batched``); ties: lower index first."""
    batched = batched and array.ndim > 0
    rows = array.reshape(array.shape[0], math.prod(array.shape[1:])) if batched else array.reshape(1, -1)
    count = min(count, rows.shape[1])
    # a stable ascending sort of the reversed row, read backwards: descending values, and
    # equal values in ascending index order
    order = rows.shape[1] - 1 - np.argsort(rows[:, ::-1], axis=1, kind="stable")[:, ::-1][:, :count]
    classes = np.empty((rows.shape[0], count), dtype=object)
    for r, (values, indices) in enumerate(zip(rows, order)):
        classes[r] = [f"{values[i]!s}:{i}".encode() for i in indices]  # the shortest exact digits
    return classes if batched else classes[0]


def check_classification(counts: dict, datatypes: dict) -> None:
    """Refuse classification of an output whose values have no order (before the run)."""
    for name in counts:
        if datatypes.get(name) in UNORDERED:
            raise InvalidRequestError(f"outputs: classification of {name!r}: its datatype "
                                      f"{datatypes[name]} has no order to rank classes by")


def classify_outputs(outputs: dict, counts: dict, datatypes: dict, batched: bool) -> tuple[dict, dict]:
    """``outputs`` and their ``datatypes`` with each output named in ``counts`` replaced
    by its top classes (BYTES)."""
    outputs, datatypes = dict(outputs), dict(datatypes)
    for name, count in counts.items():
        outputs[name], datatypes[name] = top_classes(outputs[name], count, batched), "BYTES"
    return outputs, datatypes

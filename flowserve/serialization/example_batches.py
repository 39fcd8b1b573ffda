"""Making the reference examples ``flow.save(graph, dir, examples=...)`` stores.

Examples can be given as a tensor (one batch of a one-input graph), a tuple (one batch,
one tensor per input), a list of those (several batches), a ``DataLoader`` or any other
iterable of batches (the first ``len(inputs)`` items of each batch are the inputs, the
rest, labels say, are dropped), or ``"last"``: the inputs of the graph's last calls,
which is what an inference graph that has been called stores by default. The inference
graph's outputs on them come from flowserve's own interpreter. The folder format
(``ExampleSet``, reading and writing) is ``flowserve.format.examples``.
"""

from __future__ import annotations

import datetime

import numpy as np

import flowserve
from flowserve import dtypes
from flowserve.format.examples import DEFAULT_RTOL, ExampleBatch, ExampleSet
from flowserve.ir.interpreter import run_ir
from flowserve.tensor import Tensor
from flowserve.utils.data import DataLoader

DEFAULT_MAX_BATCHES = 4  # batches taken from a DataLoader, or last calls recorded
LAST_CALLS_MAX_ROWS = 64  # rows kept from the last calls (a saved directory stays small)


def collect_examples(graph, ir, state: dict, examples, rtol: float | None,
                     max_batches: int = DEFAULT_MAX_BATCHES) -> ExampleSet | None:
    """The ``ExampleSet`` that ``flow.save(graph, dir, examples=...)`` stores: inputs
    from ``examples`` (None: the last calls of an inference graph, if any), outputs of
    the inference ``ir`` on them run by flowserve's own interpreter. ``graph``: what the
    graph deploys (``graph.deployable_state()``: name, class, mode, recent inputs)."""
    if rtol is not None and not 0 < rtol <= 1:
        raise ValueError(f"flow.save: tolerance must be in (0, 1], got {rtol}")
    batches, provenance = _input_batches(graph, examples, max_batches)
    if not batches:
        return None
    names = [v.name for v in ir.inputs]
    stored = []
    for i, batch in enumerate(batches):
        try:
            feeds = _feeds(batch, ir.inputs, i)
        except ValueError:
            if provenance["source"] == "last_calls":
                continue  # a call of another signature than the one saved
            raise
        outputs = run_ir(ir, feeds, state)
        stored.append(ExampleBatch(feeds, {v.name: np.asarray(outputs[v.name]) for v in ir.outputs}))
    if not stored:
        return None
    provenance.update(graph=graph.name, graph_class=graph.graph_class, inputs=names,
                      flowserve_version=flowserve.__version__,
                      created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    return ExampleSet(stored, rtol or DEFAULT_RTOL, provenance)


def _input_batches(graph, examples, max_batches: int) -> tuple[list, dict]:
    if examples is None or (isinstance(examples, str) and examples == "last"):
        recent = list(graph.recent_inputs)
        if examples == "last" and (graph.training or not recent):
            raise ValueError(f"flow.save: examples='last' needs an inference graph that has been called; "
                             f"{graph.name} is {'a training graph' if graph.training else 'not called yet'}")
        if graph.training:
            return [], {}
        batches = _newest_rows(recent[-max_batches:], LAST_CALLS_MAX_ROWS)
        return batches, {"source": "last_calls", "calls": len(batches)}
    if isinstance(examples, (Tensor, np.ndarray, tuple)):
        return [_as_tuple(examples)], {"source": "tensors", "batches": 1}
    if isinstance(examples, list):
        return [_as_tuple(b) for b in examples], {"source": "tensors", "batches": len(examples)}
    if isinstance(examples, str) or not hasattr(examples, "__iter__"):
        raise TypeError(f"flow.save: examples must be a tensor, a tuple of tensors, a list of batches, a "
                        f"DataLoader (or another iterable of batches) or 'last'; got {type(examples).__name__}")
    batches = []
    for batch in examples:
        batches.append(_as_tuple(batch))
        if len(batches) >= max_batches:
            break
    provenance = {"source": "dataloader" if isinstance(examples, DataLoader) else "iterable",
                  "batches": len(batches)}
    if isinstance(examples, DataLoader):
        provenance.update(dataset=type(examples.dataset).__name__, batch_size=examples.batch_size)
    return batches, provenance


def _newest_rows(calls: list, limit: int) -> list:
    """The last calls, oldest first, holding at most ``limit`` rows (the oldest one kept
    is cut to its last rows)."""
    kept, rows = [], 0
    for call in reversed(calls):
        n = int(call[0].shape[0]) if call and call[0].ndim else 1
        if rows + n > limit:
            if rows < limit and call and all(a.ndim for a in call):
                kept.append(tuple(a[n - (limit - rows):] for a in call))
            break
        kept.append(call)
        rows += n
    return kept[::-1]


def _as_tuple(batch) -> tuple:
    return tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)


def _feeds(batch: tuple, values, position: int) -> dict:
    """Input name -> array for one batch, checked against the graph's inputs."""
    if len(batch) < len(values):
        raise ValueError(f"flow.save: example batch {position} has {len(batch)} tensor(s), the graph takes "
                         f"{len(values)} input(s) ({', '.join(v.name for v in values)})")
    feeds = {}
    for v, item in zip(values, batch):
        array = np.ascontiguousarray(item.numpy() if hasattr(item, "numpy") else np.asarray(item))
        want = dtypes.from_name(v.dtype).np
        if array.dtype != want:
            if array.dtype.kind != np.dtype(want).kind:
                raise ValueError(f"flow.save: example batch {position}, input {v.name!r}: dtype {array.dtype}, "
                                 f"the graph takes {v.dtype}")
            array = array.astype(want)
        if array.ndim != len(v.shape) or tuple(array.shape[1:]) != tuple(v.shape[1:]):
            raise ValueError(f"flow.save: example batch {position}, input {v.name!r}: shape {array.shape}, "
                             f"the graph takes {tuple(v.shape)} (dim 0 may differ)")
        feeds[v.name] = array.copy()
    return feeds

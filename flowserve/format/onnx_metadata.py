"""Keys flowserve writes into an exported model's ONNX ``metadata_props``.

``flowserve export`` records what the ONNX signature cannot say; the server reads it back
when it loads the model::

    metadata = {p.key: p.value for p in model.metadata_props}
    named = json.loads(metadata.get(DYNAMIC_DIMS_KEY, "{}"))
"""

from __future__ import annotations

# JSON: input name -> {dim index: dim name}, for dims other than the batch that stay free
# (the server checks that the inputs agree on each named dim)
DYNAMIC_DIMS_KEY = "flowserve.dynamic_dims"
# text the server repeats when a request has another batch size than the graph was traced at
BATCH_NOTE_KEY = "flowserve.batch_note"

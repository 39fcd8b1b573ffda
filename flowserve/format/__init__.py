"""The saved-directory and exported-model formats, read (and written) without the training stack.

What ``flow.save`` writes and ``flowserve export`` / ``flowserve serve`` read, in modules
that import no tensor, op, ``nn``, ``autograd``, ``optim`` or ``distributed`` module:

* ``manifest``: ``flowserve.json`` (``SavedGraphManifest``, format versions, file names);
* ``tensors``: safetensors files (``read_tensors`` / ``write_tensors``, bfloat16 included);
* ``examples``: the reference examples in ``examples/`` (``ExampleSet``, ``read_examples``);
* ``verification``: ``<model>.examples/verify.json`` beside an exported model (``Criteria``,
  ``read_sidecar``) and the tolerances export holds models to;
* ``onnx_metadata``: the keys flowserve writes into an exported model's metadata.

``flowserve.serialization`` (``flow.save`` / ``flow.load``) builds on it::

    from flowserve.format.manifest import read_manifest
    read_manifest("mlp_dir").graph_name
"""

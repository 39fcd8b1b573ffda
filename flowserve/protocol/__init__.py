"""The Open Inference Protocol (KServe v2), shared by ``flowserve.clients`` and ``flowserve.server``.

One copy of each fact of the wire protocol, importing nothing else from flowserve but
its errors, so that the clients stay a small install and the server needs no training
stack; neither front imports the other:

* ``protos``: the ``inference.GRPCInferenceService`` messages (and ``protos.health``,
  gRPC's standard health service), built from the ``.proto`` files beside them;
* ``datatypes``: the protocol's datatype names and their numpy, flowserve and Triton names;
* ``tensors``: numpy arrays <-> the raw little-endian tensor bytes of the binary
  extension and of gRPC's ``raw_input_contents``/``raw_output_contents``::

    from flowserve.protocol.tensors import TensorCodec, array_to_raw
    codec = TensorCodec(ValueError)
    codec.array_from_raw(array_to_raw(np.arange(3)), "INT64", [3]).tolist()   # [0, 1, 2]
"""

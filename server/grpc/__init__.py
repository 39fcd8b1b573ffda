"""The gRPC front end over the ``DataPlane``: ``inference.GRPCInferenceService`` and
``grpc.health.v1.Health`` on grpcio's server.

``app``: the servicers and ``GrpcServer``; ``codec``: protobuf messages <->
``InferenceRequest`` / ``InferenceResponse``. The messages are the protocol's
(``flowserve.protocol.protos``).
"""

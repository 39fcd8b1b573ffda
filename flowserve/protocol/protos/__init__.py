"""Message classes of the ``inference.GRPCInferenceService`` proto.

The one copy of the wire protocol: the clients and the server's gRPC front end both
use it. Built from the serialized descriptor into a private descriptor pool, so these
classes coexist with any other ``inference.*`` definitions loaded in the same
process (tritonclient's, for one). Access messages as attributes::

    from flowserve.protocol import protos
    request = protos.ModelInferRequest(model_name="mlp")
    protos.METHODS["ModelInfer"]   # (request class, response class, streaming)
"""

from __future__ import annotations

from types import MappingProxyType

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from .grpc_service_descriptor import SERIALIZED_FILE_DESCRIPTOR

SERVICE_NAME = "inference.GRPCInferenceService"

_POOL = descriptor_pool.DescriptorPool()
_FILE = _POOL.Add(descriptor_pb2.FileDescriptorProto.FromString(SERIALIZED_FILE_DESCRIPTOR))


def _message(name: str):
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"inference.{name}"))


def _methods() -> dict:
    service = _POOL.FindServiceByName(SERVICE_NAME)
    table = {}
    for method in service.methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        table[method.name] = (request, response, method.client_streaming)
    return table


METHODS = MappingProxyType(_methods())
_FILE_PROTO = descriptor_pb2.FileDescriptorProto.FromString(SERIALIZED_FILE_DESCRIPTOR)
MESSAGE_NAMES = tuple(m.name for m in _FILE_PROTO.message_type)
globals().update({name: _message(name) for name in MESSAGE_NAMES})
DataType = _POOL.FindEnumTypeByName("inference.DataType")

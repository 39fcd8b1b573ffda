"""Message classes of gRPC's standard health service, ``grpc.health.v1.Health``.

The protocol of https://github.com/grpc/grpc/blob/master/doc/health-checking.md, which
Kubernetes' gRPC probes, ``grpc-health-probe`` and cloud load balancers call::

    message HealthCheckRequest { string service = 1; }
    message HealthCheckResponse {
      enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
      ServingStatus status = 1;
    }
    message HealthListRequest {}
    message HealthListResponse { map<string, HealthCheckResponse> statuses = 1; }
    service Health {
      rpc Check(HealthCheckRequest) returns (HealthCheckResponse);
      rpc List(HealthListRequest) returns (HealthListResponse);
      rpc Watch(HealthCheckRequest) returns (stream HealthCheckResponse);
    }

Built in a private descriptor pool, as ``protos`` is, so it coexists with grpcio's own
copy (``grpcio-health-checking``) in one process::

    from flowserve.protocol.protos import health
    health.HealthCheckRequest(service="")
    health.HealthCheckResponse.SERVING
"""

from __future__ import annotations

from types import MappingProxyType

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "grpc.health.v1"
SERVICE_NAME = f"{PACKAGE}.Health"
STATUSES = ("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")
METHODS = (  # name, request, response, server streaming
    ("Check", "HealthCheckRequest", "HealthCheckResponse", False),
    ("List", "HealthListRequest", "HealthListResponse", False),
    ("Watch", "HealthCheckRequest", "HealthCheckResponse", True),
)


def _file() -> descriptor_pb2.FileDescriptorProto:
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="grpc/health/v1/health.proto", package=PACKAGE,
                                               syntax="proto3")
    proto.message_type.add(name="HealthCheckRequest").field.add(
        name="service", number=1, label=field.LABEL_OPTIONAL, type=field.TYPE_STRING)
    response = proto.message_type.add(name="HealthCheckResponse")
    status = response.enum_type.add(name="ServingStatus")
    for number, name in enumerate(STATUSES):
        status.value.add(name=name, number=number)
    response.field.add(name="status", number=1, label=field.LABEL_OPTIONAL, type=field.TYPE_ENUM,
                       type_name=f".{PACKAGE}.HealthCheckResponse.ServingStatus")
    proto.message_type.add(name="HealthListRequest")
    listing = proto.message_type.add(name="HealthListResponse")
    entry = listing.nested_type.add(name="StatusesEntry")
    entry.field.add(name="key", number=1, label=field.LABEL_OPTIONAL, type=field.TYPE_STRING)
    entry.field.add(name="value", number=2, label=field.LABEL_OPTIONAL, type=field.TYPE_MESSAGE,
                    type_name=f".{PACKAGE}.HealthCheckResponse")
    entry.options.map_entry = True
    listing.field.add(name="statuses", number=1, label=field.LABEL_REPEATED, type=field.TYPE_MESSAGE,
                      type_name=f".{PACKAGE}.HealthListResponse.StatusesEntry")
    service = proto.service.add(name="Health")
    for name, request, response, streaming in METHODS:
        service.method.add(name=name, input_type=f".{PACKAGE}.{request}", output_type=f".{PACKAGE}.{response}",
                           server_streaming=streaming)
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())


def _message(name: str):
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


HealthCheckRequest, HealthCheckResponse = _message("HealthCheckRequest"), _message("HealthCheckResponse")
HealthListRequest, HealthListResponse = _message("HealthListRequest"), _message("HealthListResponse")
REQUESTS = MappingProxyType({name: _message(request) for name, request, _, _ in METHODS})  # method -> request class

"""Regenerates ``grpc_service_descriptor.py`` from ``grpc_service.proto``.

The service is built at import time from the serialized file descriptor into a
private descriptor pool (see ``__init__.py``), so the generated module holds no
protobuf-runtime-specific code and never clashes with other ``inference.*``
definitions (tritonclient's) in the same process. Needs ``grpcio-tools``::

    python -m flowserve.protocol.protos.generate            # rewrites the module
    python -m flowserve.protocol.protos.generate --check    # exit 1 if stale
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

from google.protobuf import descriptor_pb2
from grpc_tools import protoc  # grpcio-tools: only regenerating needs it

HERE = pathlib.Path(__file__).resolve().parent
PROTO_NAME = "grpc_service.proto"
MODULE_NAME = "grpc_service_descriptor.py"


def compile_descriptor(proto_dir: pathlib.Path = HERE) -> bytes:
    """Serialized ``FileDescriptorProto`` of ``proto_dir/grpc_service.proto``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "set.pb"
        argv = ["protoc", f"-I{proto_dir}", f"--descriptor_set_out={out}", PROTO_NAME]
        if protoc.main(argv) != 0:
            raise RuntimeError(f"protoc failed on {proto_dir / PROTO_NAME}")
        file_set = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return file_set.file[0].SerializeToString(deterministic=True)


def render_module(serialized: bytes) -> str:
    """Python source of the descriptor module for ``serialized``."""
    chunks = [serialized[i : i + 48] for i in range(0, len(serialized), 48)]
    body = "\n".join(f"    {chunk!r}" for chunk in chunks)
    return (
        f"# Generated from {PROTO_NAME} by generate.py. DO NOT EDIT.\n"
        "# flake8: noqa\n"
        f"SERIALIZED_FILE_DESCRIPTOR = (\n{body}\n)\n"
    )


def main(argv: list[str]) -> int:
    source = render_module(compile_descriptor(HERE))
    target = HERE / MODULE_NAME
    if "--check" in argv:
        return 0 if target.read_text() == source else 1
    target.write_text(source)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Graph mode's ONNX backend: IR → ONNX lowering (``lower``, one ``lowering`` module per op
family), the protobuf ``builder``, opset ``versions``, the one table of execution providers
(``providers``: cpu, cuda, tensorrt, openvino; ``session_pool``, a session per batch size) and
the one ONNX Runtime module under it (``runtime``, with ``openvino``).

It sits in the core below ``nn.graph``, which imports it at module level; the exporter
(``flowserve.exporter``) and the server build on it. Importing this package loads nothing:
each module loads what it needs, so the server takes ``runtime`` without ``nn``.
"""

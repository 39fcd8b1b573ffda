"""``flowserve.exporter``: IR -> ONNX lowering, fusion, checks and numeric parity."""

"""``flowserve.exporter``: IR -> ONNX lowering, fusion, checks and numeric parity.

>>> from flowserve.exporter import export
>>> result = export("saved_dir", "model.onnx")   # doctest: +SKIP
"""

from flowserve.exporter.export import ExportResult, export  # noqa: F401

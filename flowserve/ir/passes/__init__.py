"""IR passes: each one file, one job, returning ``PassResult(ir, modified)``.

The exporter's passes (``exporter/passes``) follow the same convention and use the same
dead-code elimination; no pass here emits ONNX (lowering knowledge lives in ``exporter/``).
"""

from flowserve.ir.graph import PassResult  # noqa: F401
from flowserve.ir.passes.dce import eliminate_dead_code  # noqa: F401
from flowserve.ir.passes.outputs import name_outputs  # noqa: F401

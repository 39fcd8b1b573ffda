"""IR passes: each one file, one job, returning ``PassResult(ir, modified)``.

The exporter's passes (``exporter/passes``) follow the same convention and use the same
dead-code elimination; no pass here emits ONNX (the lowering to ONNX lives in
``flowserve/onnx_backend/lowering/``, keyed by each op's ``Primitive``).
"""

from flowserve.ir.graph import PassResult  # noqa: F401
from flowserve.ir.passes.dce import eliminate_dead_code  # noqa: F401
from flowserve.ir.passes.outputs import name_outputs  # noqa: F401

"""IR passes: each one file, one job, returning ``(ir, modified)``."""

from flowserve.ir.passes.dce import eliminate_dead_code  # noqa: F401
from flowserve.ir.passes.outputs import name_outputs  # noqa: F401

"""Op cases of the collective primitives (a world of one process: each returns its input;
the multi-process behaviour is tested in tests/distributed)."""

from tests.core.op_cases import Case

CASES = {
    "all_reduce": [Case([(2, 3)])],
    "reduce_scatter": [Case([(6,)])],
    "all_gather": [Case([(4,)])],
}

"""One rank of the global-tensor run: every case of ``tests.distributed.global_cases`` on
this rank; arrays to OUT/rank<r>.npz and error messages to OUT/rank<r>.json."""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import flowserve as flow  # noqa: E402
from tests.distributed.global_cases import run  # noqa: E402

out = Path(sys.argv[1])
rank, world = flow.env.get_rank(), flow.env.get_world_size()
arrays, errors = run(rank, world)
np.savez(out / f"rank{rank}.npz", **arrays)
(out / f"rank{rank}.json").write_text(json.dumps(errors))

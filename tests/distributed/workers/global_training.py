"""One rank of the global training run: every case of ``tests.distributed.global_training``
on this rank; arrays to OUT/rank<r>.npz."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import flowserve as flow  # noqa: E402
from tests.distributed.global_training import run  # noqa: E402

out = Path(sys.argv[1])
rank, world = flow.env.get_rank(), flow.env.get_world_size()
np.savez(out / f"rank{rank}.npz", **run(rank, world))

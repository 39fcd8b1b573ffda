"""A rank that fails on purpose: ``kill`` (SIGKILL itself during training), ``raise`` (a
Python exception in the script), ``hang`` (stop answering), or ``join`` (only join the
others, then return)."""

import os
import signal
import sys
import time

import numpy as np

import flowserve as flow

how = sys.argv[1]
comm = flow.env.init()
rank = flow.env.get_rank()
data = np.ones(1000, np.float32)
comm.allreduce(data)
if how == "join":
    sys.exit(0)
for step in range(1000):
    if rank == 1 and step == 3:
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if how == "raise":
            raise ValueError("a bug in the training script")
        time.sleep(600)
    comm.allreduce(data)
    data /= comm.world_size

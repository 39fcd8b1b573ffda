"""``flowserve.nn.parallel``: data parallelism as PyTorch spells it (``DataParallel`` in one
process, ``DistributedDataParallel`` over the processes of ``flow.env``)."""

from flowserve.nn.parallel.data_parallel import DataParallel  # noqa: F401
from flowserve.nn.parallel.distributed import DistributedDataParallel  # noqa: F401

"""``flowserve.distributed``: the collective engine behind data parallelism, ZeRO and
pipeline stages (``Communicator``), and the launcher
(``python -m flowserve.distributed.launch --nproc_per_node N train.py``)."""

from flowserve.distributed.communicator import (  # noqa: F401
    Communicator,
    GlooCommunicator,
    Handle,
    LocalCommunicator,
)

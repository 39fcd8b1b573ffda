"""``flowserve.utils.data``: datasets, samplers and the DataLoader (PyTorch's API).

>>> import flowserve as flow
>>> from flowserve.utils.data import DataLoader, TensorDataset
>>> loader = DataLoader(TensorDataset(flow.randn(8, 2), flow.arange(8)), batch_size=4)
>>> [y.tolist() for _, y in loader]
[[0, 1, 2, 3], [4, 5, 6, 7]]
"""

from flowserve.utils.data.collate import default_collate, default_convert  # noqa: F401
from flowserve.utils.data.dataloader import DataLoader  # noqa: F401
from flowserve.utils.data.dataset import (  # noqa: F401
    ConcatDataset,
    Dataset,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from flowserve.utils.data.distributed import DistributedSampler  # noqa: F401
from flowserve.utils.data.sampler import (  # noqa: F401
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
)

from flowserve.nn.modules.activation import LogSoftmax, ReLU, Sigmoid, Softmax, Tanh  # noqa: F401
from flowserve.nn.modules.container import ModuleDict, ModuleList, Sequential  # noqa: F401
from flowserve.nn.modules.linear import Flatten, Identity, Linear  # noqa: F401
from flowserve.nn.modules.loss import CrossEntropyLoss, L1Loss, MSELoss, NLLLoss, _Loss  # noqa: F401
from flowserve.nn.modules.activation import (  # noqa: F401
    ELU, GELU, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, LogSigmoid, Mish, ReLU6, SiLU, Softplus,
)
from flowserve.nn.modules.container import ParameterDict, ParameterList  # noqa: F401
from flowserve.nn.modules.conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d  # noqa: F401
from flowserve.nn.modules.dropout import Dropout  # noqa: F401
from flowserve.nn.modules.loss import (  # noqa: F401
    BCELoss, BCEWithLogitsLoss, HuberLoss, KLDivLoss, SmoothL1Loss,
)
from flowserve.nn.modules.normalization import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, SyncBatchNorm  # noqa: F401
from flowserve.nn.modules.pooling import (  # noqa: F401
    AdaptiveAvgPool2d, AvgPool2d, MaxPool1d, MaxPool2d, Upsample, UpsamplingBilinear2d, UpsamplingNearest2d,
)
from flowserve.nn.modules.sparse import Embedding  # noqa: F401
from flowserve.nn.modules.transformer import (  # noqa: F401
    MultiheadAttention, TransformerEncoder, TransformerEncoderLayer,
)

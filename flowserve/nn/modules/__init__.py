from flowserve.nn.modules.activation import LogSoftmax, ReLU, Sigmoid, Softmax, Tanh  # noqa: F401
from flowserve.nn.modules.container import ModuleDict, ModuleList, Sequential  # noqa: F401
from flowserve.nn.modules.linear import Flatten, Identity, Linear  # noqa: F401
from flowserve.nn.modules.loss import CrossEntropyLoss, L1Loss, MSELoss, NLLLoss, _Loss  # noqa: F401
from flowserve.nn.modules.activation import (  # noqa: F401
    ELU, GELU, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, LogSigmoid, Mish, ReLU6, SiLU, Softplus,
)
from flowserve.nn.modules.container import ParameterDict, ParameterList  # noqa: F401
from flowserve.nn.modules.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d  # noqa: F401
from flowserve.nn.modules.dropout import Dropout  # noqa: F401
from flowserve.nn.modules.loss import (  # noqa: F401
    BCELoss, BCEWithLogitsLoss, HuberLoss, KLDivLoss, SmoothL1Loss,
)
from flowserve.nn.modules.normalization import (  # noqa: F401
    BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, LayerNorm, SyncBatchNorm,
)
from flowserve.nn.modules.pooling import (  # noqa: F401
    AdaptiveAvgPool2d, AvgPool2d, MaxPool1d, MaxPool2d, Upsample, UpsamplingBilinear2d, UpsamplingNearest2d,
)
from flowserve.nn.modules.sparse import Embedding  # noqa: F401
from flowserve.nn.modules.transformer import (  # noqa: F401
    MultiheadAttention, TransformerEncoder, TransformerEncoderLayer,
)
from flowserve.nn.modules.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase  # noqa: F401
from flowserve.nn.modules.transformer_decoder import (  # noqa: F401
    Transformer, TransformerDecoder, TransformerDecoderLayer,
)
from flowserve.nn.modules.activation import (  # noqa: F401
    CELU, GLU, SELU, Hardshrink, PReLU, RReLU, Softmax2d, Softmin, Softshrink, Softsign, Tanhshrink, Threshold,
)
from flowserve.nn.modules.channelshuffle import ChannelShuffle  # noqa: F401
from flowserve.nn.modules.conv import ConvTranspose3d  # noqa: F401
from flowserve.nn.modules.distance import CosineSimilarity, PairwiseDistance  # noqa: F401
from flowserve.nn.modules.dropout import Dropout1d, Dropout2d, Dropout3d  # noqa: F401
from flowserve.nn.modules.fold import Fold, Unfold  # noqa: F401
from flowserve.nn.modules.linear import Bilinear, Unflatten  # noqa: F401
from flowserve.nn.modules.loss import (  # noqa: F401
    CosineEmbeddingLoss, CTCLoss, GaussianNLLLoss, HingeEmbeddingLoss, MarginRankingLoss, MultiLabelSoftMarginLoss,
    PoissonNLLLoss, SoftMarginLoss, TripletMarginLoss,
)
from flowserve.nn.modules.normalization import (  # noqa: F401
    FusedBatchNorm2d, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, RMSNorm,
)
from flowserve.nn.modules.padding import (  # noqa: F401
    ConstantPad1d, ConstantPad2d, ReflectionPad1d, ReflectionPad2d, ReplicationPad1d, ReplicationPad2d, ZeroPad1d,
    ZeroPad2d,
)
from flowserve.nn.modules.pixelshuffle import PixelShuffle, PixelUnshuffle  # noqa: F401
from flowserve.nn.modules.pooling import (  # noqa: F401
    AdaptiveAvgPool1d, AdaptiveAvgPool3d, AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d, AvgPool1d,
    AvgPool3d, LPPool1d, LPPool2d, MaxPool3d,
)
from flowserve.nn.modules.sparse import EmbeddingBag  # noqa: F401

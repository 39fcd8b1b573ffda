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
from flowserve.nn.modules.more_layers import (  # noqa: F401
    CELU, GLU, SELU, AdaptiveMaxPool1d, AvgPool3d, MaxPool3d, AdaptiveMaxPool2d, ConstantPad2d, CosineSimilarity, Dropout1d, Dropout2d,
    Dropout3d, Fold, FusedBatchNorm2d, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, PairwiseDistance, PixelShuffle,
    PixelUnshuffle, PReLU, ReflectionPad2d, ReplicationPad2d, Softmax2d, Softsign, Threshold, Unflatten, Unfold,
    ZeroPad2d,
)
from flowserve.nn.modules.ported import (  # noqa: F401
    AdaptiveAvgPool3d, AdaptiveMaxPool3d, ConvTranspose3d, CTCLoss, EmbeddingBag,
)
from flowserve.nn.modules.ported_layers import (  # noqa: F401
    AdaptiveAvgPool1d, AvgPool1d, Bilinear, ChannelShuffle, ConstantPad1d, CosineEmbeddingLoss, GaussianNLLLoss,
    HingeEmbeddingLoss, Hardshrink, LPPool1d, LPPool2d, MarginRankingLoss, MultiLabelSoftMarginLoss, PoissonNLLLoss,
    ReflectionPad1d, ReplicationPad1d, RMSNorm, Softmin, Softshrink, SoftMarginLoss, Tanhshrink, TripletMarginLoss,
    ZeroPad1d,
)

"""``flow.backends``: the backend queries and switches PyTorch scripts touch
(``import flowserve.backends.cudnn as cudnn`` works as ``torch.backends.cudnn`` does).

``mps.is_available()`` is False (flowserve has no Metal backend) and
``cudnn.is_available()`` says whether a CUDA device is usable, so scripts that pick their
device with these run unchanged. The cuDNN/TF32 switches (``cudnn.benchmark``,
``cudnn.deterministic``, ``cudnn.allow_tf32``, ``cuda.matmul.allow_tf32``) are plain module
attributes a script may set; nothing in flowserve reads them, and results do not depend on
them: flowserve computes in float32 without TF32, and its graphs run on ONNX Runtime, which
chooses its own convolution algorithms.

>>> import flowserve as flow
>>> flow.backends.cudnn.benchmark = True
>>> flow.backends.mps.is_available()
False
"""

from flowserve.backends import cuda, cudnn, mps  # noqa: F401

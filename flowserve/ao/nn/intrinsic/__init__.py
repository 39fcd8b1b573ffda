"""Fused float modules, PyTorch's ``torch.ao.nn.intrinsic`` (``flowserve.nn.intrinsic``):
what ``flowserve.ao.quantization.fuse_modules_qat`` puts in place of the modules it fuses.

>>> import flowserve as flow
>>> from flowserve.ao.nn import intrinsic as nni
>>> nni.ConvBn2d(flow.nn.Conv2d(3, 4, 1), flow.nn.BatchNorm2d(4))[1]
BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
"""

from flowserve.nn.intrinsic import BNReLU2d, ConvBn2d, ConvBnReLU2d, ConvReLU2d, LinearReLU

__all__ = ["BNReLU2d", "ConvBn2d", "ConvBnReLU2d", "ConvReLU2d", "LinearReLU"]

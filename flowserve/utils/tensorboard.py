"""``flow.utils.tensorboard.SummaryWriter``: ``torch.utils.tensorboard``'s writer of TensorBoard
event files (scalars, histograms, text), written with the ``tensorboard`` package.

Importing this module needs nothing; creating a writer needs ``tensorboard``
(``pip install tensorboard``) and says so in its ``ImportError`` when it is missing.

>>> import tempfile
>>> import flowserve as flow
>>> from flowserve.utils.tensorboard import SummaryWriter
>>> with SummaryWriter(tempfile.mkdtemp()) as writer:  # doctest: +SKIP
...     writer.add_scalar("loss/train", flow.tensor(0.5), global_step=1)
"""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime

import numpy as np

try:  # the writer needs tensorboard only when created: say so then
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    _IMPORT_ERROR = None
except ImportError as e:
    summary_pb2 = Event = TensorProto = TensorShapeProto = EventFileWriter = None
    _IMPORT_ERROR = e

__all__ = ["SummaryWriter"]

_MISSING = ("flow.utils.tensorboard.SummaryWriter writes TensorBoard event files with the 'tensorboard' "
            "package, which is not installed: pip install tensorboard")


def _tensorboard():
    if EventFileWriter is None:
        raise ImportError(_MISSING) from _IMPORT_ERROR
    return summary_pb2, TensorProto, TensorShapeProto, EventFileWriter


def _numpy(value) -> np.ndarray:
    """A flowserve or PyTorch tensor, a numpy array or a number, as a float64 array."""
    if hasattr(value, "detach"):
        value = value.detach()
    if hasattr(value, "numpy"):
        value = value.numpy()
    return np.asarray(value, dtype=np.float64)


class SummaryWriter:
    """PyTorch's ``SummaryWriter``: events go to ``log_dir`` (default
    ``runs/<date>_<host><comment>``), read by ``tensorboard --logdir``."""

    def __init__(self, log_dir=None, comment: str = "", purge_step=None, max_queue: int = 10,
                 flush_secs: int = 120, filename_suffix: str = ""):
        self._pb, self._tensor_proto, self._shape_proto, event_file_writer = _tensorboard()
        if log_dir is None:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = str(log_dir)
        self._writer = event_file_writer(self.log_dir, max_queue, flush_secs, filename_suffix)

    def get_logdir(self) -> str:
        return self.log_dir

    def _add(self, value, global_step, walltime) -> None:
        event = Event(summary=self._pb.Summary(value=[value]), wall_time=walltime or time.time())
        if global_step is not None:
            event.step = int(global_step)
        self._writer.add_event(event)

    def add_scalar(self, tag: str, scalar_value, global_step=None, walltime=None, new_style: bool = False,
                   double_precision: bool = False) -> None:
        """One point of the curve ``tag`` at ``global_step``."""
        value = float(_numpy(scalar_value).reshape(()))
        self._add(self._pb.Summary.Value(tag=tag, simple_value=value), global_step, walltime)

    def add_scalars(self, main_tag: str, tag_scalar_dict: dict, global_step=None, walltime=None) -> None:
        """Several curves at once, tagged ``main_tag/tag`` (one event file; PyTorch writes one
        sub-directory per tag, which TensorBoard shows as the same curves)."""
        for tag, value in tag_scalar_dict.items():
            self.add_scalar(f"{main_tag}/{tag}", value, global_step, walltime)

    def add_histogram(self, tag: str, values, global_step=None, bins="tensorflow", walltime=None,
                      max_bins=None) -> None:
        """The distribution of ``values`` (numpy's histogram; ``"tensorflow"`` means ``"auto"``)."""
        flat = _numpy(values).reshape(-1)
        counts, edges = np.histogram(flat, bins="auto" if bins == "tensorflow" else bins)
        histogram = self._pb.HistogramProto(
            min=float(flat.min()), max=float(flat.max()), num=float(flat.size), sum=float(flat.sum()),
            sum_squares=float((flat * flat).sum()), bucket_limit=edges[1:].tolist(), bucket=counts.tolist())
        self._add(self._pb.Summary.Value(tag=tag, histo=histogram), global_step, walltime)

    def add_text(self, tag: str, text_string: str, global_step=None, walltime=None) -> None:
        """A markdown text shown in TensorBoard's Text tab."""
        metadata = self._pb.SummaryMetadata(plugin_data=self._pb.SummaryMetadata.PluginData(plugin_name="text"))
        tensor = self._tensor_proto(dtype="DT_STRING", string_val=[text_string.encode("utf-8")],
                                    tensor_shape=self._shape_proto(dim=[self._shape_proto.Dim(size=1)]))
        value = self._pb.Summary.Value(tag=tag + "/text_summary", metadata=metadata, tensor=tensor)
        self._add(value, global_step, walltime)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

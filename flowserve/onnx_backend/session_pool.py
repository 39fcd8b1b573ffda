"""A session per input shape: what graph mode's device run and the server's CUDA batches share.

ONNX Runtime's CUDA convolutions keep the cuDNN plan of the last input shape only: a
session whose calls alternate between two batch sizes plans again at every call
(MobileNetV2 on an H200: 350-1,100 ms a call, against 2.5 ms with a session per shape).
So each shape key (a batch size) runs on a session of its own::

    pool = SessionPool(session, new_session=make, keep=8)
    pool.get(32).run(...)       # the first key takes ``session``, later ones ``make()``
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Optional


class SessionPool:
    """Sessions by shape key. The first key takes ``session``; each later one a session of
    ``new_session()`` (without it, every key shares ``session``). ``keep``: the most
    recently used keys kept (older ones let go), None: all. ``keys``: how many keys there
    will be (the server's batch buckets): once each has its session, ``new_session`` (which
    holds the model) is let go."""

    def __init__(self, session, new_session: Optional[Callable] = None, *, keep: int | None = None,
                 keys: int | None = None):
        self._first = session
        self._spare = session  # not taken by a key yet
        self._new_session = new_session
        self._keep = keep
        self._keys = keys
        self._sessions: OrderedDict = OrderedDict()  # key -> session, least recently used first

    def get(self, key):
        """The session of ``key``, made at its first use."""
        session = self._sessions.get(key)
        if session is not None:
            self._sessions.move_to_end(key)
            return session
        session = self._sessions[key] = self._make()
        if self._keep is not None and len(self._sessions) > self._keep:
            self._sessions.popitem(last=False)
        if self._keys is not None and len(self._sessions) >= self._keys:
            self._new_session = None  # every key has its session
        return session

    def _make(self):
        if self._spare is not None:
            session, self._spare = self._spare, None
            return session
        return self._new_session() if self._new_session is not None else self._first

    def __iter__(self):
        """The keys with a session, least recently used first."""
        return iter(self._sessions)

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def sessions(self) -> int:
        """Distinct sessions held (keys may share one)."""
        return len({id(s) for s in self._sessions.values()})

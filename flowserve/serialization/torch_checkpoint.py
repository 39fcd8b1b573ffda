"""Read PyTorch checkpoints (``torch.save``'s zip format) without running any of their code.

A ``.pt``/``.pth`` file is a zip holding ``<name>/data.pkl`` (a pickle) and one raw file
per tensor storage (``<name>/data/<key>``). Python's ``pickle`` would import and call
whatever the pickle names; this reader is instead a small pickle *interpreter* of its own
(as PyTorch's ``weights_only=True`` unpickler is): it understands the opcodes that plain
data uses, and a global is only ever looked up in ``ALLOWED`` — the tensor, storage and
``OrderedDict`` rebuilders, mapped to flowserve's own functions. Any other global
(``os.system``, ``builtins.eval``, a user class) is refused with an error that names it,
before anything is called; nothing is imported.

>>> state = read_torch_checkpoint("resnet18.pth")   # doctest: +SKIP
>>> model.load_state_dict(state)                     # doctest: +SKIP
"""

from __future__ import annotations

import struct
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np

from flowserve import dtypes
from flowserve.errors import SavedGraphError
from flowserve.nn.parameter import Parameter
from flowserve.ops.creation import from_numpy

ZIP_MAGIC = b"PK\x03\x04"

STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": dtypes.bfloat16.np, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}


class CheckpointError(SavedGraphError):
    """A checkpoint that cannot be read safely (unknown global, damaged pickle or storage)."""


class _StorageType:
    def __init__(self, name: str):
        self.name = name
        self.dtype = np.dtype(STORAGE_DTYPES[name])


class _Storage:
    """A storage's elements, read from the zip on first use (``persistent_load``)."""

    def __init__(self, array: np.ndarray):
        self.array = array


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
    array = _strided(storage, offset, size, stride)
    t = from_numpy(array)
    if requires_grad and t.dtype.is_floating_point:
        t.requires_grad = True
    return t


def _strided(storage, offset, size, stride) -> np.ndarray:
    """The tensor's elements, bounds-checked before numpy touches memory."""
    if not isinstance(storage, _Storage):
        raise CheckpointError(f"a tensor was rebuilt from {type(storage).__name__}, not a storage")
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    offset = int(offset)
    data = storage.array
    if len(size) != len(stride) or offset < 0 or any(s < 0 for s in size + stride):
        raise CheckpointError(f"invalid tensor layout: size {size}, stride {stride}, offset {offset}")
    if 0 not in size:
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= data.size:
            raise CheckpointError(f"tensor of size {size} (stride {stride}, offset {offset}) reaches "
                                  f"past its storage of {data.size} elements")
    view = np.lib.stride_tricks.as_strided(data[offset:] if data.size else data, shape=size,
                                           strides=tuple(s * data.itemsize for s in stride), writeable=False)
    return np.array(view, copy=True)


def _rebuild_parameter(data, requires_grad=True, hooks=None, state=None):
    return Parameter(data, requires_grad=requires_grad)


def _ordered_dict(*args):
    return OrderedDict(*args)


# the only globals a checkpoint may name, and what they become
ALLOWED = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    **{("torch", name): _StorageType(name) for name in STORAGE_DTYPES},
}


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(4)


def is_torch_zip(path: Path) -> bool:
    return _head(path) == ZIP_MAGIC


def is_pickle(path: Path) -> bool:
    """A raw pickle (PyTorch's legacy format starts with one): protocol 2+ opcode first."""
    head = _head(path)
    return len(head) >= 2 and head[0] == 0x80 and head[1] in range(2, 6)


def read_torch_checkpoint(path) -> object:
    """The object a ``torch.save`` zip holds, with tensors as flowserve tensors."""
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise CheckpointError(f"{path}: not a PyTorch checkpoint zip ({exc})") from None
    with archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise CheckpointError(f"{path}: expected one <name>/data.pkl in the zip, found {len(pickles)}")
        prefix = pickles[0][: -len("data.pkl")]
        byteorder = archive.read(prefix + "byteorder").decode() if prefix + "byteorder" in archive.namelist() \
            else "little"
        if byteorder not in ("little", "big"):
            raise CheckpointError(f"{path}: unknown byteorder {byteorder!r}")

        def load_storage(pid):
            if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                    and isinstance(pid[1], _StorageType) and isinstance(pid[2], str)):
                raise CheckpointError(f"{path}: unexpected persistent id {pid!r}")
            name = f"{prefix}data/{pid[2]}"
            if name not in archive.namelist():
                raise CheckpointError(f"{path}: storage {pid[2]!r} is missing from the zip")
            raw = archive.read(name)
            dtype = pid[1].dtype.newbyteorder("<" if byteorder == "little" else ">")
            if len(raw) % dtype.itemsize:
                raise CheckpointError(f"{path}: storage {pid[2]!r} has {len(raw)} bytes, not a multiple of "
                                      f"{dtype.itemsize}")
            return _Storage(np.frombuffer(raw, dtype=dtype).astype(pid[1].dtype))

        try:
            return _Interpreter(archive.read(pickles[0]), load_storage, str(path)).run()
        except CheckpointError:
            raise
        except (IndexError, KeyError, ValueError, TypeError, struct.error, UnicodeDecodeError) as exc:
            raise CheckpointError(f"{path}: damaged checkpoint pickle ({type(exc).__name__}: {exc})") from None


class _Mark:
    pass


_MARK = _Mark()


class _Interpreter:
    """The pickle opcodes plain data uses; globals only through ``ALLOWED``."""

    def __init__(self, data: bytes, persistent_load, where: str):
        self.data, self.pos, self.where = data, 0, where
        self.stack: list = []
        self.memo: dict = {}
        self.persistent_load = persistent_load

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise CheckpointError(f"{self.where}: truncated pickle")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def _unpack(self, fmt: str):
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]

    def _pop_mark(self) -> list:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] is _MARK:
                items = self.stack[i + 1:]
                del self.stack[i:]
                return items
        raise CheckpointError(f"{self.where}: pickle MARK missing")

    def _global(self, module: str, name: str):
        found = ALLOWED.get((module, name))
        if found is None:
            raise CheckpointError(
                f"{self.where}: refusing to load: the checkpoint names the global {module}.{name}, which is "
                "not a tensor, storage or plain container (a checkpoint that is only weights names none); "
                "nothing was run. Re-save the weights alone (model.state_dict()) or as safetensors")
        return found

    def run(self):
        while True:
            op = self._take(1)
            handler = _OPS.get(op)
            if handler is None:
                raise CheckpointError(f"{self.where}: unsupported pickle opcode {op!r} at byte {self.pos - 1}")
            if handler is _stop:
                return self.stack.pop()
            handler(self)


def _stop(vm):
    raise AssertionError("handled in run()")


def _call(vm):
    args = vm.stack.pop()
    fn = vm.stack.pop()
    if not any(fn is allowed for allowed in ALLOWED.values()) or isinstance(fn, _StorageType):
        raise CheckpointError(f"{vm.where}: the checkpoint calls {fn!r}, which is not an allowed rebuilder")
    if not isinstance(args, tuple):
        raise CheckpointError(f"{vm.where}: malformed call arguments")
    vm.stack.append(fn(*args))


def _build(vm):
    state = vm.stack.pop()
    obj = vm.stack[-1]
    if not isinstance(obj, OrderedDict) or not isinstance(state, dict):
        raise CheckpointError(f"{vm.where}: the checkpoint sets the state of a {type(obj).__name__}, "
                              "which only plain OrderedDicts may have")
    # PyTorch's state dicts carry ``_metadata`` (module versions) as attribute state: not needed


def _setitems(vm):
    items = vm._pop_mark()
    target = vm.stack[-1]
    if not isinstance(target, dict):
        raise CheckpointError(f"{vm.where}: SETITEMS on a {type(target).__name__}")
    for k, v in zip(items[::2], items[1::2]):
        target[k] = v


def _setitem(vm):
    value, key = vm.stack.pop(), vm.stack.pop()
    if not isinstance(vm.stack[-1], dict):
        raise CheckpointError(f"{vm.where}: SETITEM on a {type(vm.stack[-1]).__name__}")
    vm.stack[-1][key] = value


def _appends(vm):
    items = vm._pop_mark()
    if not isinstance(vm.stack[-1], list):
        raise CheckpointError(f"{vm.where}: APPENDS on a {type(vm.stack[-1]).__name__}")
    vm.stack[-1].extend(items)


def _append(vm):
    value = vm.stack.pop()
    if not isinstance(vm.stack[-1], list):
        raise CheckpointError(f"{vm.where}: APPEND on a {type(vm.stack[-1]).__name__}")
    vm.stack[-1].append(value)


def _global_op(vm):
    module = vm.data[vm.pos:vm.data.index(b"\n", vm.pos)].decode("utf-8")
    vm.pos += len(module) + 1
    name = vm.data[vm.pos:vm.data.index(b"\n", vm.pos)].decode("utf-8")
    vm.pos += len(name) + 1
    vm.stack.append(vm._global(module, name))


def _stack_global(vm):
    name, module = vm.stack.pop(), vm.stack.pop()
    if not isinstance(module, str) or not isinstance(name, str):
        raise CheckpointError(f"{vm.where}: malformed STACK_GLOBAL")
    vm.stack.append(vm._global(module, name))


def _put(fmt):
    def op(vm):
        vm.memo[vm._unpack(fmt)] = vm.stack[-1]
    return op


def _get(fmt):
    def op(vm):
        key = vm._unpack(fmt)
        if key not in vm.memo:
            raise CheckpointError(f"{vm.where}: pickle memo {key} is missing")
        vm.stack.append(vm.memo[key])
    return op


def _push(value_of):
    def op(vm):
        vm.stack.append(value_of(vm))
    return op


def _tuple_n(n):
    def op(vm):
        items = vm.stack[len(vm.stack) - n:] if n else []
        del vm.stack[len(vm.stack) - n:]
        vm.stack.append(tuple(items))
    return op


def _text(fmt):
    return _push(lambda vm: vm._take(vm._unpack(fmt)).decode("utf-8"))


def _bytes(fmt):
    return _push(lambda vm: bytes(vm._take(vm._unpack(fmt))))


def _long(fmt):
    return _push(lambda vm: int.from_bytes(vm._take(vm._unpack(fmt)), "little", signed=True))


_OPS = {
    b"\x80": lambda vm: vm._take(1),  # PROTO
    b"\x95": lambda vm: vm._take(8),  # FRAME
    b".": _stop,
    b"(": _push(lambda vm: _MARK),
    b"}": _push(lambda vm: {}),
    b"]": _push(lambda vm: []),
    b")": _push(lambda vm: ()),
    b"N": _push(lambda vm: None),
    b"\x88": _push(lambda vm: True),
    b"\x89": _push(lambda vm: False),
    b"K": _push(lambda vm: vm._unpack("<B")),
    b"M": _push(lambda vm: vm._unpack("<H")),
    b"J": _push(lambda vm: vm._unpack("<i")),
    b"\x8a": _long("<B"),
    b"G": _push(lambda vm: vm._unpack(">d")),
    b"X": _text("<I"),
    b"\x8c": _text("<B"),
    b"\x8d": _text("<Q"),
    b"B": _bytes("<I"),
    b"C": _bytes("<B"),
    b"q": _put("<B"),
    b"r": _put("<I"),
    b"\x94": lambda vm: vm.memo.__setitem__(len(vm.memo), vm.stack[-1]),  # MEMOIZE
    b"h": _get("<B"),
    b"j": _get("<I"),
    b"t": lambda vm: vm.stack.append(tuple(vm._pop_mark())),
    b"\x85": _tuple_n(1),
    b"\x86": _tuple_n(2),
    b"\x87": _tuple_n(3),
    b"l": lambda vm: vm.stack.append(list(vm._pop_mark())),
    b"d": lambda vm: vm.stack.append(dict(zip(*[iter(vm._pop_mark())] * 2))),
    b"u": _setitems,
    b"s": _setitem,
    b"e": _appends,
    b"a": _append,
    b"c": _global_op,
    b"\x93": _stack_global,
    b"R": _call,
    b"b": _build,
    b"Q": lambda vm: vm.stack.append(vm.persistent_load(vm.stack.pop())),
}

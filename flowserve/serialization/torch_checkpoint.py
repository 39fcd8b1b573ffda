"""Read PyTorch checkpoints (``torch.save``'s zip format) without running any of their code.

A ``.pt``/``.pth`` file is a zip holding ``<name>/data.pkl`` (a pickle) and one raw file
per tensor storage (``<name>/data/<key>``). Python's ``pickle`` would import and call
whatever the pickle names; this reader is instead a small pickle *interpreter* of its own
(as PyTorch's ``weights_only=True`` unpickler is): it understands the opcodes that plain
data uses, and a global is only ever looked up in ``ALLOWED`` — the tensor, storage and
``OrderedDict`` rebuilders, mapped to flowserve's own functions. Any other global
(``os.system``, ``builtins.eval``, a user class) is refused with an error that names it,
before anything is called; nothing is imported.

The work a file can cause is bounded as well as its code:

- every byte read from the zip (the pickle and each storage, decompressed) is counted
  against ``max_bytes`` before it is read, and so are the Python objects the pickle's
  opcodes make (default :func:`default_max_bytes`: twice the file's size plus 64 MiB, plus
  32 bytes per byte of pickle as stored; ``torch.save`` stores its members uncompressed);
- each storage is read once, and every tensor is a numpy view of it (as in PyTorch,
  tensors saved as views of one storage still share memory), so a storage referenced a
  hundred times costs its size once; a tensor larger than ``max_bytes`` (a stride-0
  one, say) is refused rather than handed out;
- containers nest at most ``MAX_DEPTH`` deep and contain no cycles, and dict keys are
  strings, numbers or flat tuples of them, so nothing later recurses without end;
- every failure is one :class:`CheckpointError` line that names the file and shows no
  ``repr()`` of the checkpoint's data.

>>> state = read_torch_checkpoint("resnet18.pth")   # doctest: +SKIP
>>> model.load_state_dict(state)                     # doctest: +SKIP
"""

from __future__ import annotations

import math
import struct
import types
import zipfile
import zlib
from collections import OrderedDict
from pathlib import Path

import numpy as np

from flowserve import dtypes
from flowserve.errors import SavedGraphError
from flowserve.nn.parameter import Parameter
from flowserve.ops.creation import from_numpy
from flowserve.tensor import Tensor

ZIP_MAGIC = b"PK\x03\x04"
MAX_DEPTH = 100  # containers inside containers; real checkpoints nest under 10
MAX_DIMS = 64  # numpy's limit
_BUDGET_FLOOR = 64 << 20
_OBJECT_BYTES_PER_PICKLE_BYTE = 32
_BYTES_PER_OP = 80  # the most one pickle opcode makes Python hold (an empty dict and its stack slot)
_OPS_PER_CHARGE = 4096

STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": dtypes.bfloat16.np, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}


class CheckpointError(SavedGraphError):
    """A checkpoint that cannot be read safely (unknown global, damaged pickle or storage,
    or one that asks for more memory than its budget)."""


def default_max_bytes(file_size: int, pickle_stored: int = 0) -> int:
    """The default budget of bytes a checkpoint may make the reader decompress and hold:
    twice the file's size plus 64 MiB, plus 32 bytes per byte its pickle takes in the file
    (a pickle of 20,000 small tensors makes 30 bytes of Python objects per byte; a
    compressed pickle, which real checkpoints never are, gets no more than its stored size)."""
    return 2 * file_size + _BUDGET_FLOOR + _OBJECT_BYTES_PER_PICKLE_BYTE * pickle_stored


def _shown(text: str, limit: int = 80) -> str:
    """A name from the checkpoint, as it may appear in an error: printable, one line, short."""
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    return text if len(text) <= limit else text[:limit] + "..."


class _StorageType:
    def __init__(self, name: str):
        self.name = name
        self.dtype = np.dtype(STORAGE_DTYPES[name])


class _Storage:
    """A storage's elements: one buffer, read from the zip once, that tensors view."""

    def __init__(self, array: np.ndarray, limit: int):
        self.array, self.limit = array, limit


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
    t = from_numpy(_strided(storage, offset, size, stride))
    if requires_grad is True and t.dtype.is_floating_point:
        t.requires_grad = True
    return t


def _strided(storage, offset, size, stride) -> np.ndarray:
    """A view of the storage, its layout checked before numpy touches memory."""
    if not isinstance(storage, _Storage):
        raise CheckpointError(f"a tensor was rebuilt from a {type(storage).__name__}, not a storage")
    if not (isinstance(size, tuple) and isinstance(stride, tuple) and len(size) == len(stride) <= MAX_DIMS
            and type(offset) is int and all(type(n) is int for n in size + stride)):
        raise CheckpointError("invalid tensor layout: size, stride and offset must be integers, "
                              f"as many strides as dims (at most {MAX_DIMS})")
    data = storage.array
    if offset < 0 or any(n < 0 for n in size + stride):
        raise CheckpointError(f"invalid tensor layout: negative size, stride or offset "
                              f"({_layout(size, stride, offset)})")
    numel = math.prod(size)
    if max((numel, *size), default=1) * data.itemsize > storage.limit:
        raise CheckpointError(f"a tensor ({_layout(size, stride, offset)}) is larger than the limit of "
                              f"{storage.limit} bytes (max_bytes), whatever its storage")
    if numel == 0:
        return np.empty(size, data.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= data.size:
        raise CheckpointError(f"tensor ({_layout(size, stride, offset)}) reaches past its storage of "
                              f"{data.size} elements")
    if _contiguous(size, stride):
        return data[offset:offset + numel].reshape(size)
    return np.lib.stride_tricks.as_strided(data[offset:], shape=size,
                                           strides=tuple(s * data.itemsize for s in stride))


def _layout(size, stride, offset) -> str:
    return _shown(f"size {size}, stride {stride}, offset {offset}", 160)


def _contiguous(size, stride) -> bool:
    expected = 1
    for n, s in zip(reversed(size), reversed(stride)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def _rebuild_parameter(data, requires_grad=True, hooks=None, state=None):
    if not isinstance(data, Tensor) or not isinstance(requires_grad, bool):
        raise CheckpointError(f"a parameter was rebuilt from a {type(data).__name__}, not a tensor")
    return Parameter(data, requires_grad=requires_grad)


_KEY_TYPES = (str, int, float, bool, bytes, type(None))


def _checked_key(key):
    """Dict keys are hashed and compared: only strings, numbers and flat tuples of them."""
    if type(key) in _KEY_TYPES or (type(key) is tuple and all(type(k) in _KEY_TYPES for k in key)):
        return key
    raise CheckpointError(f"a dict key is a {type(key).__name__}; keys may be strings, numbers, or flat "
                          "tuples of them")


def _ordered_dict(*args):
    if not args:
        return OrderedDict()
    if len(args) != 1 or not isinstance(args[0], (list, tuple, dict)):
        raise CheckpointError("OrderedDict is rebuilt from nothing, a dict or a list of pairs")
    pairs = args[0].items() if isinstance(args[0], dict) else args[0]
    result = OrderedDict()
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise CheckpointError("OrderedDict is rebuilt from pairs; an item is not a pair")
        result[_checked_key(pair[0])] = pair[1]
    return result


# the only globals a checkpoint may name, and what they become
ALLOWED = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    **{("torch", name): _StorageType(name) for name in STORAGE_DTYPES},
}
_REBUILDERS = (_ordered_dict, _rebuild_tensor, _rebuild_parameter)


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(4)


def is_torch_zip(path: Path) -> bool:
    return _head(path) == ZIP_MAGIC


def is_pickle(path: Path) -> bool:
    """A raw pickle (PyTorch's legacy format starts with one): protocol 2+ opcode first."""
    head = _head(path)
    return len(head) >= 2 and head[0] == 0x80 and head[1] in range(2, 6)


# what a damaged or hostile file can make the zip reader, numpy or the interpreter raise
_DAMAGE = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError, ValueError, TypeError,
           KeyError, IndexError, AttributeError, struct.error, RuntimeError, MemoryError, ArithmeticError)


def read_torch_checkpoint(path, max_bytes: int | None = None) -> object:
    """The object a ``torch.save`` zip holds, with tensors as flowserve tensors.

    ``max_bytes`` bounds the bytes decompressed and held while reading (default
    :func:`default_max_bytes` of the file's size); a file that needs more is refused.
    """
    path = Path(path)
    try:
        with _ZipReader(path, max_bytes) as reader:
            root = _Interpreter(reader.read_pickle(), reader, str(path)).run()
        _check_nesting(root, str(path))
        return root
    except CheckpointError:
        raise
    except _DAMAGE as exc:
        raise CheckpointError(f"{path}: damaged checkpoint ({type(exc).__name__})") from None


class _ZipReader:
    """The members of a checkpoint zip, each read once and counted against the budget."""

    def __init__(self, path: Path, max_bytes: int | None):
        self.where = str(path)
        self.max_bytes, self.file_size = max_bytes, path.stat().st_size
        self.used = 0
        self.storages: dict = {}
        try:
            self.archive = zipfile.ZipFile(path)
        except zipfile.BadZipFile as exc:
            raise CheckpointError(f"{path}: not a PyTorch checkpoint zip ({exc})") from None
        try:
            self.file = open(path, "rb")
        except OSError:
            self.archive.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()
        self.archive.close()

    def read_pickle(self) -> bytes:
        pickles = [n for n in self.archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise CheckpointError(f"{self.where}: expected one <name>/data.pkl in the zip, found {len(pickles)}")
        self.prefix = pickles[0][: -len("data.pkl")]
        pickle_info = self.archive.getinfo(pickles[0])
        self.limit = default_max_bytes(self.file_size, pickle_info.compress_size) if self.max_bytes is None \
            else int(self.max_bytes)
        self.byteorder = "little"
        info = self.archive.NameToInfo.get(self.prefix + "byteorder")
        if info is not None:
            self.byteorder = self._read_bytes(info, "byteorder record").decode("ascii", "replace")
            if self.byteorder not in ("little", "big"):
                raise CheckpointError(f"{self.where}: unknown byteorder {_shown(self.byteorder)}")
        self.charge(pickle_info.file_size, "pickle's strings and bytes")  # the objects its opcodes make
        return self._read_bytes(pickle_info, "pickle")

    def _read_bytes(self, info: zipfile.ZipInfo, what: str) -> bytes:
        self.charge(info.file_size, what)
        with self.archive.open(info) as member:  # stops at the declared size, checks the CRC
            data = member.read(info.file_size)
        if len(data) != info.file_size:
            raise CheckpointError(f"{self.where}: the {what} is shorter than the zip's index says")
        return data

    def charge(self, n: int, what: str) -> None:
        self.used += n
        if self.used > self.limit:
            raise CheckpointError(f"{self.where}: the {what} ({n} bytes) brings what the checkpoint needs to "
                                  f"{self.used} bytes, past the limit of {self.limit} (max_bytes)")

    def _read(self, info: zipfile.ZipInfo, what: str) -> bytearray:
        """A member's bytes, at most its declared size (counted first), CRC checked."""
        self.charge(info.file_size, what)
        buf = bytearray(info.file_size)
        if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 1:
            read = self._read_stored(info, memoryview(buf))
        else:
            with self.archive.open(info) as member:
                read = member.readinto(buf)
        if read != info.file_size or (info.compress_type == zipfile.ZIP_STORED and zlib.crc32(buf) != info.CRC):
            raise CheckpointError(f"{self.where}: the {what} is damaged (size or CRC differs from the zip's index)")
        return buf

    def _read_stored(self, info: zipfile.ZipInfo, into: memoryview) -> int:
        """An uncompressed member straight into ``into`` (torch.save's members are stored)."""
        self.file.seek(info.header_offset)
        head = self.file.read(30)
        if len(head) != 30 or head[:4] != ZIP_MAGIC:
            raise CheckpointError(f"{self.where}: zip member header missing")
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        self.file.seek(info.header_offset + 30 + name_len + extra_len)
        return self.file.readinto(into)

    def load_storage(self, pid) -> _Storage:
        if not (type(pid) is tuple and len(pid) == 5 and type(pid[0]) is str and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str)):
            raise CheckpointError(f"{self.where}: a persistent id is a {type(pid).__name__}, not a storage "
                                  "record ('storage', type, key, location, size)")
        key, dtype = pid[2], pid[1].dtype
        if key in self.storages:
            storage = self.storages[key]
            if storage.array.dtype != dtype:
                raise CheckpointError(f"{self.where}: storage {_shown(key)} is read as two dtypes")
            return storage
        info = self.archive.NameToInfo.get(f"{self.prefix}data/{key}")
        if info is None:
            raise CheckpointError(f"{self.where}: storage {_shown(key)} is missing from the zip")
        if info.file_size % dtype.itemsize:
            raise CheckpointError(f"{self.where}: storage {_shown(key)} has {info.file_size} bytes, not a "
                                  f"multiple of {dtype.itemsize}")
        raw = np.frombuffer(self._read(info, f"storage {_shown(key)}"), dtype=np.uint8)
        if self.byteorder == "big" and dtype.itemsize > 1:
            raw.view(f"u{dtype.itemsize}").byteswap(inplace=True)
        storage = self.storages[key] = _Storage(raw.view(dtype), self.limit)
        return storage


def _check_nesting(root, where: str) -> None:
    """Containers nest at most MAX_DEPTH deep, without cycles (each visited once)."""
    containers = (list, tuple, dict)
    if not isinstance(root, containers):
        return
    height: dict = {}  # id -> height of a container whose contents were all visited
    open_ids = {id(root)}
    path = [[root, iter(_contents(root)), 0]]
    while path:
        frame = path[-1]
        for child in frame[1]:
            if not isinstance(child, containers):
                continue
            if id(child) in height:
                frame[2] = max(frame[2], height[id(child)])
                if len(path) + height[id(child)] > MAX_DEPTH:
                    raise CheckpointError(f"{where}: containers nest more than {MAX_DEPTH} deep")
                continue
            if id(child) in open_ids:
                raise CheckpointError(f"{where}: a container contains itself")
            if len(path) >= MAX_DEPTH:
                raise CheckpointError(f"{where}: containers nest more than {MAX_DEPTH} deep")
            open_ids.add(id(child))
            path.append([child, iter(_contents(child)), 0])
            break
        else:
            path.pop()
            open_ids.discard(id(frame[0]))
            height[id(frame[0])] = frame[2] + 1
            if path:
                path[-1][2] = max(path[-1][2], frame[2] + 1)


def _contents(container):
    return container.values() if isinstance(container, dict) else container


class _Interpreter:
    """The pickle opcodes plain data uses; globals only through ``ALLOWED``."""

    def __init__(self, data: bytes, reader: _ZipReader, where: str):
        self.data, self.pos, self.where = data, 0, where
        self.stack: list = []
        self.marks: list = []  # stack lengths at each MARK (as CPython's metastack)
        self.memo: dict = {}
        self.persistent_load, self.charge = reader.load_storage, reader.charge

    def _take(self, n: int) -> bytes:
        start, end = self.pos, self.pos + n
        if end > len(self.data):
            raise CheckpointError(f"{self.where}: truncated pickle")
        self.pos = end
        return self.data[start:end]

    def _unpack(self, fmt: str):
        layout = _STRUCTS[fmt]
        start = self.pos
        self.pos = start + layout.size
        if self.pos > len(self.data):
            raise CheckpointError(f"{self.where}: truncated pickle")
        return layout.unpack_from(self.data, start)[0]

    def _pop_mark(self) -> list:
        if not self.marks:
            raise CheckpointError(f"{self.where}: pickle MARK missing")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def _global(self, module: str, name: str):
        found = ALLOWED.get((module, name))
        if found is None:
            raise CheckpointError(
                f"{self.where}: refusing to load: the checkpoint names the global {_shown(module)}.{_shown(name)}, "
                "which is not a tensor, storage or plain container (a checkpoint that is only weights names none); "
                "nothing was run. Re-save the weights alone (model.state_dict()) or as safetensors")
        return found

    def run(self):
        op, count, data, ops = b"", 0, self.data, _OPS
        try:
            while True:
                count += 1
                if not count % _OPS_PER_CHARGE:  # what the objects opcodes make may hold
                    self.charge(_OPS_PER_CHARGE * _BYTES_PER_OP, "pickle's objects")
                op = data[self.pos:self.pos + 1]
                self.pos += 1
                handler = ops.get(op)
                if handler is None:
                    raise CheckpointError(f"{self.where}: unsupported pickle opcode {op!r} at byte {self.pos - 1}"
                                          if op else f"{self.where}: truncated pickle")
                if handler is _stop:
                    return self.stack.pop()
                handler(self)
        except CheckpointError as exc:
            if str(exc).startswith(self.where):
                raise
            raise CheckpointError(f"{self.where}: {exc}") from None
        except _DAMAGE as exc:
            raise CheckpointError(f"{self.where}: damaged checkpoint pickle ({type(exc).__name__} at opcode "
                                  f"{op!r}, byte {self.pos - 1})") from None


def _stop(vm):
    raise AssertionError("handled in run()")


def _call(vm):
    args = vm.stack.pop()
    fn = vm.stack.pop()
    if not any(fn is allowed for allowed in _REBUILDERS):
        raise CheckpointError(f"the checkpoint calls a {type(fn).__name__}, which is not an allowed rebuilder")
    if not isinstance(args, tuple):
        raise CheckpointError("malformed call arguments")
    vm.stack.append(fn(*args))


def _build(vm):
    state = vm.stack.pop()
    obj = vm.stack[-1]
    if not isinstance(obj, OrderedDict) or not isinstance(state, dict):
        raise CheckpointError(f"the checkpoint sets the state of a {type(obj).__name__}, "
                              "which only plain OrderedDicts may have")
    # PyTorch's state dicts carry ``_metadata`` (module versions) as attribute state: not needed


def _dict_target(vm, op: str) -> dict:
    if not vm.stack or not isinstance(vm.stack[-1], dict):
        raise CheckpointError(f"{op} on a {type(vm.stack[-1]).__name__ if vm.stack else 'empty stack'}")
    return vm.stack[-1]


def _setitems(vm):
    items = vm._pop_mark()
    target = _dict_target(vm, "SETITEMS")
    for k, v in zip(items[::2], items[1::2]):
        target[_checked_key(k)] = v


def _setitem(vm):
    value, key = vm.stack.pop(), vm.stack.pop()
    _dict_target(vm, "SETITEM")[_checked_key(key)] = value


def _dict(vm):
    items = vm._pop_mark()
    vm.stack.append({_checked_key(k): v for k, v in zip(items[::2], items[1::2])})


def _list_target(vm, op: str) -> list:
    if not vm.stack or not isinstance(vm.stack[-1], list):
        raise CheckpointError(f"{op} on a {type(vm.stack[-1]).__name__ if vm.stack else 'empty stack'}")
    return vm.stack[-1]


def _appends(vm):
    items = vm._pop_mark()
    _list_target(vm, "APPENDS").extend(items)


def _append(vm):
    value = vm.stack.pop()
    _list_target(vm, "APPEND").append(value)


def _line(vm) -> str:
    end = vm.data.find(b"\n", vm.pos)
    if end < 0:
        raise CheckpointError("truncated GLOBAL")
    text = vm.data[vm.pos:end].decode("utf-8")
    vm.pos = end + 1
    return text


def _global_op(vm):
    module = _line(vm)
    vm.stack.append(vm._global(module, _line(vm)))


def _stack_global(vm):
    name, module = vm.stack.pop(), vm.stack.pop()
    if not isinstance(module, str) or not isinstance(name, str):
        raise CheckpointError("malformed STACK_GLOBAL")
    vm.stack.append(vm._global(module, name))


def _put(fmt):
    def op(vm):
        vm.memo[vm._unpack(fmt)] = vm.stack[-1]
    return op


def _get(fmt):
    def op(vm):
        key = vm._unpack(fmt)
        if key not in vm.memo:
            raise CheckpointError(f"pickle memo {key} is missing")
        vm.stack.append(vm.memo[key])
    return op


def _push(value_of):
    def op(vm):
        vm.stack.append(value_of(vm))
    return op


def _tuple_n(n):
    def op(vm):
        if len(vm.stack) < n:
            raise CheckpointError(f"TUPLE{n} on a stack of {len(vm.stack)}")
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


_STRUCTS = types.MappingProxyType({fmt: struct.Struct(fmt) for fmt in ("<B", "<H", "<i", "<I", "<Q", ">d")})

_OPS = {
    b"\x80": lambda vm: vm._take(1),  # PROTO
    b"\x95": lambda vm: vm._take(8),  # FRAME
    b".": _stop,
    b"(": lambda vm: vm.marks.append(len(vm.stack)),
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
    b"l": lambda vm: vm.stack.append(vm._pop_mark()),
    b"d": _dict,
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

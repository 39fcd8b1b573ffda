"""flowserve against the servers people would pick instead, measured in one run.

Peers (each from its own venv, started as a subprocess; see ``bench/peers/README.md``):
Triton Inference Server through PyTriton (an ``@batch`` callable running onnxruntime,
Triton's dynamic batcher), MLServer (a custom onnxruntime runtime, adaptive batching),
and the plain FastAPI + onnxruntime app (``plain_fastapi_app.py``, HTTP JSON only) as
the floor. A peer whose Python cannot import it is skipped, saying so; nothing is
installed here.

Models: MLP 784-512-512-10 and MobileNetV2-224 (random weights), batch 1 per request,
max batch 32 for every batcher; rows: HTTP binary, HTTP JSON and gRPC at concurrency 1,
8 and 32. Triton's ``perf_analyzer`` (``bench_perf_analyzer.py``) drives the servers that
answer Triton's model-config call (flowserve, Triton); MLServer and the plain app have
none, so the project's load generator (``clients/perf.py``) drives them, and flowserve
again beside them: each ratio compares runs of one driver. Before any timing every
server's answer to the same input is checked against onnxruntime in process. One server
runs at a time; rounds go over all servers in turn (interleaved), figures are medians
over rounds. First, the ceiling: what the engine alone does in process on the same ONNX
(images/s at batch 1 and at batch 8, one session of all cores and two single-threaded
sessions side by side, and OpenVINO where it imports), which no server on these cores can
pass once the model's compute fills them::

    python bench/bench_peers.py --cudart-dir /tmp/cudart/nvidia/cuda_runtime/lib \\
        --pytriton-python /tmp/venv-pytriton/bin/python \\
        --mlserver-python /tmp/venv-mlserver/bin/python
    python bench/bench_peers.py --quick ...     # c=1 and 32, HTTP JSON and gRPC
    python bench/bench_peers.py --models mlp --protocols http-json --concurrencies 1 ...
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

try:  # measured beside onnxruntime where installed (pip install "flowserve[openvino]")
    import openvino
except ImportError:
    openvino = None

from bench_perf_analyzer import perf_analyzer
from bench_serving import free_port, mlp_model, mobilenet_v2_model, start, stop
from flowserve.clients import GRPCClient, HTTPClient
from flowserve.clients.perf import run_load

HERE = pathlib.Path(__file__).resolve().parent
PROTOCOLS = ("http-binary", "http-json", "grpc")
CONCURRENCIES = (1, 8, 32)
MAX_BATCH, QUEUE_DELAY_US = 32, 500
# perf_analyzer finds no window when answers take about as long as one (MobileNetV2 at
# concurrency 32 on a loaded machine: seconds). Such rows get windows of at least this
# long for every server (a ratio compares windows of one length), and any other row
# without a steady window is measured again once with them and more trials
LONG_WINDOW_MS, RETRY_TRIALS = 10_000, 5
LONG_WINDOW_ROWS = (("mobilenet", 32),)  # (model, concurrency)
UNSTEADY = ("No valid requests recorded", "Failed to obtain stable measurement")
BASELINE = "flowserve baseline"  # --baseline-python: another build, shown beside, not a peer


@dataclasses.dataclass
class Server:
    """One server under test: how to start it and what it can be asked."""

    name: str
    python: str
    protocols: tuple
    speaks_model_config: bool  # perf_analyzer needs Triton's /v2/models/NAME/config
    command: callable  # (models: dict, http_port, grpc_port, workdir) -> argv
    has_model_ready: bool = True  # /v2/models/NAME/ready (the plain app: its models load first)


def flowserve_command(python, models, http, grpc, workdir):
    repository = workdir / "repository"
    for name, path in models.items():
        (repository / name / "1").mkdir(parents=True, exist_ok=True)
        shutil.copy(path, repository / name / "1" / "model.onnx")
        (repository / name / "config.json").write_text(json.dumps({
            "max_batch_size": MAX_BATCH,
            "dynamic_batching": {"max_queue_delay_us": QUEUE_DELAY_US}}))
    flowserve = pathlib.Path(python).parent / "flowserve"
    return [str(flowserve), "serve", str(repository), "--http-port", str(http),
            "--grpc-port", str(grpc), "--log-level", "warning"]


def flowserve_workers_command(python, models, http, grpc, workdir, workers=2):
    """flowserve with ``workers`` processes, each with one ONNX Runtime thread per session
    (workers x threads = the 2 cores of the machine these figures come from)."""
    return [*flowserve_command(python, models, http, grpc, workdir), "--workers", str(workers),
            "--intra-op-threads", "1"]


def pytriton_command(python, models, http, grpc, workdir):
    return [python, str(HERE / "peers" / "pytriton_server.py"), str(http), str(grpc),
            *(f"{n}={p}" for n, p in models.items()), "--metrics-port", str(free_port()),
            "--max-batch-size", str(MAX_BATCH), "--max-queue-delay-us", str(QUEUE_DELAY_US),
            "--workspace", str(workdir / f"pytriton-{http}")]


def mlserver_command(python, models, http, grpc, workdir):
    return [python, str(HERE / "peers" / "mlserver_server.py"), str(http), str(grpc),
            *(f"{n}={p}" for n, p in models.items()), "--workdir", str(workdir / "mlserver"),
            "--metrics-port", str(free_port()), "--max-batch-size", str(MAX_BATCH),
            "--max-batch-time-s", str(QUEUE_DELAY_US / 1e6)]


def plain_command(python, models, http, grpc, workdir):
    (name, path), = models.items()  # one model per process
    return [python, str(HERE / "plain_fastapi_app.py"), str(path), str(http)]


def servers(args) -> list[Server]:
    """The servers to measure; a peer whose Python lacks it is left out, saying why.
    With ``--workers-scaling``: flowserve with 1 process and with 2 instead of the peers."""
    if args.workers_scaling:
        return [Server("flowserve", sys.executable, PROTOCOLS, True, flowserve_command),
                Server("flowserve 2 workers", sys.executable, ("http-binary", "grpc"), True,
                       flowserve_workers_command)]
    candidates = [
        (Server("flowserve", sys.executable, PROTOCOLS, True, flowserve_command), ""),
        (Server(BASELINE, args.baseline_python, PROTOCOLS, True, flowserve_command),
         "import flowserve") if args.baseline_python else None,
        (Server("triton (pytriton)", args.pytriton_python, PROTOCOLS, True, pytriton_command),
         "import pytriton, onnxruntime"),
        (Server("mlserver", args.mlserver_python, ("http-json", "grpc"), False,
                mlserver_command), "import mlserver, onnxruntime"),
        (Server("plain fastapi", sys.executable, ("http-json",), False, plain_command, False),
         "import fastapi, uvicorn, onnxruntime"),
    ]
    chosen = []
    for server, probe in filter(None, candidates):
        if args.peers is not None and server.name.split()[0] not in args.peers + ["flowserve"]:
            continue
        if probe and not importable(server.python, probe):
            print(f"# skipped {server.name}: {server.python} cannot `{probe}` "
                  "(bench/peers/README.md says how to install it)")
            continue
        chosen.append(server)
    return chosen


def importable(python: str, statement: str) -> bool:
    if not python or not pathlib.Path(python).exists():
        return False
    return subprocess.run([python, "-c", statement], capture_output=True).returncode == 0


@dataclasses.dataclass
class Row:
    model: str
    protocol: str
    concurrency: int


def measure(server: Server, row: Row, driver: str, urls: dict, inputs: dict, args, env) -> dict:
    """infer/s, p50 and p99 (µs) of one window of ``driver`` on ``server``."""
    address = urls["grpc" if row.protocol == "grpc" else "http"]
    interval_ms = args.interval_ms * (3 if row.model == "mobilenet" else 1)
    if driver == "perf_analyzer":
        extra = (("--input-tensor-format", "json", "--output-tensor-format", "json")
                 if row.protocol == "http-json" else ())
        protocol = row.protocol.split("-")[0]
        longer = max(4 * interval_ms, LONG_WINDOW_MS)
        if (row.model, row.concurrency) in LONG_WINDOW_ROWS:
            return perf_analyzer(address, protocol, row.concurrency, longer, env, row.model,
                                 extra, max_trials=RETRY_TRIALS)
        try:
            return perf_analyzer(address, protocol, row.concurrency, interval_ms, env,
                                 row.model, extra)
        except RuntimeError as exc:
            if not any(message in str(exc) for message in UNSTEADY):
                raise
            print(f"  {server.name} perf_analyzer {row}: no steady {interval_ms} ms window; "
                  f"again with {longer} ms windows, up to {RETRY_TRIALS} trials", flush=True)
            return perf_analyzer(address, protocol, row.concurrency, longer, env, row.model,
                                 extra, max_trials=RETRY_TRIALS)
    scheme = "" if row.protocol == "grpc" else "http://"
    report = asyncio.run(run_load(scheme + address, row.model, row.concurrency,
                                  3 * interval_ms / 1000, row.protocol.split("-")[0],
                                  row.protocol == "http-binary", inputs={"x": inputs[row.model]},
                                  warmup_s=0.5))
    if report.errors:
        raise RuntimeError(f"{server.name} {row}: {report.errors} errors, {report.first_error}")
    return {"throughput": report.throughput, "p50_us": report.percentile_ms(50) * 1e3,
            "p99_us": report.percentile_ms(99) * 1e3}


def wait_for_models(urls: dict, models: dict, timeout_s: float) -> None:
    """Wait until every model is ready (Triton is ready before PyTriton binds them)."""
    client, deadline = HTTPClient("http://" + urls["http"]), time.monotonic() + timeout_s
    try:
        while not all(client.is_model_ready(model) for model in models):
            if time.monotonic() > deadline:
                raise TimeoutError(f"models {list(models)} not ready in {timeout_s} s")
            time.sleep(0.5)
    finally:
        client.close()


def check_answers(server: Server, urls: dict, models: dict, inputs: dict, expected: dict) -> None:
    """Every model's answer over every protocol ``server`` speaks matches onnxruntime's."""
    for model in models:
        for protocol in server.protocols:
            if protocol == "grpc":
                client = GRPCClient(urls["grpc"])
            else:
                client = HTTPClient("http://" + urls["http"], binary=protocol == "http-binary")
            try:
                got = client.infer(model, {"x": inputs[model]})["y"]
            finally:
                client.close()
            if not np.allclose(got, expected[model], rtol=1e-4, atol=1e-5):
                raise AssertionError(f"{server.name} {model} over {protocol}: answer differs "
                                     f"from onnxruntime by {np.abs(got - expected[model]).max()}")


def drivers_of(server: Server, protocol: str, peers_by_driver: dict, have_pa: bool) -> list:
    """The drivers that measure ``server`` in a row: its own, and for flowserve each driver
    some peer of the row needs."""
    own = "perf_analyzer" if have_pa and server.speaks_model_config else "perf.py"
    if not server.name.startswith("flowserve"):  # flowserve, or its baseline build
        return [own]
    return [d for d in ("perf_analyzer", "perf.py") if peers_by_driver.get((protocol, d))]


def run_round(server: Server, rows: list, models: dict, inputs: dict, expected: dict,
              results: dict, plan: dict, args, env, workdir: pathlib.Path) -> None:
    """Start ``server`` (once per model for the plain app), measure its rows, stop it."""
    groups = [{m: p} for m, p in models.items()] if server.name == "plain fastapi" else [models]
    for group in groups:
        http, grpc = free_port(), free_port()
        urls = {"http": f"127.0.0.1:{http}", "grpc": f"127.0.0.1:{grpc}"}
        command = server.command(server.python, group, http, grpc, workdir)
        log = workdir / f"{server.name.split()[0]}.log"
        process = start(command, "http://" + urls["http"], timeout_s=300, log=log)
        try:
            if server.has_model_ready:
                wait_for_models(urls, group, timeout_s=300)
            check_answers(server, urls, group, inputs, expected)
            for row in rows:
                if row.model not in group or row.protocol not in server.protocols:
                    continue
                for driver in plan[(server.name, row.protocol)]:
                    try:
                        figures = measure(server, row, driver, urls, inputs, args, env)
                    except RuntimeError as exc:  # a window with no answer: say so, go on
                        print(f"  {server.name} {driver} {row}: no figures "
                              f"({str(exc).strip().splitlines()[-1][:160]})", flush=True)
                        continue
                    results.setdefault((row.model, row.protocol, row.concurrency, server.name,
                                        driver), []).append(figures)
                    print(f"  {server.name:<18} {driver:<13} {row.model:<9} {row.protocol:<11} "
                          f"c={row.concurrency:<3} {figures['throughput']:>8,.1f}/s "
                          f"p50 {figures['p50_us'] / 1e3:>7.2f} ms", flush=True)
        finally:
            stop(process)


def median_figures(runs: list) -> dict:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def engine_ceiling(model: onnx.ModelProto, sample: np.ndarray, seconds: float = 1.0,
                   rounds: int = 3) -> dict:
    """Images per second the engines alone do on ``model`` in this process, by setting:
    the median of ``rounds`` alternating blocks of about ``seconds`` each."""
    data = model.SerializeToString()
    cores = os.cpu_count() or 1

    def ort_session(threads):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])

    def serially(run, batch):  # -> a callable timing one block
        x = np.repeat(sample, batch, axis=0)

        def block():
            done, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                run(x)
                done += batch
            return done / (time.perf_counter() - start)
        return block

    def side_by_side(sessions, batch):  # one thread per single-threaded session
        x = np.repeat(sample, batch, axis=0)

        def block():
            counts = [0] * len(sessions)
            start = time.perf_counter()

            def loop(i):
                while time.perf_counter() - start < seconds:
                    sessions[i].run(None, {"x": x})
                    counts[i] += batch
            with concurrent.futures.ThreadPoolExecutor(len(sessions)) as pool:
                list(pool.map(loop, range(len(sessions))))
            return sum(counts) / (time.perf_counter() - start)
        return block

    one = ort_session(cores)
    singles = [ort_session(1) for _ in range(cores)]
    blocks = {}
    for batch in (1, 8):
        blocks[f"onnxruntime, 1 session x {cores} threads, batch {batch}"] = serially(
            lambda x: one.run(None, {"x": x}), batch)
        blocks[f"onnxruntime, {cores} sessions x 1 thread, batch {batch}"] = side_by_side(
            singles, batch)
    if openvino is not None:
        core = openvino.Core()
        for batch in (1, 8):
            ov_model = core.read_model(data)
            ov_model.reshape({ov_model.inputs[0].any_name: [batch, *sample.shape[1:]]})
            request = core.compile_model(ov_model, "CPU", {
                "INFERENCE_NUM_THREADS": cores, "PERFORMANCE_HINT": "LATENCY"}).create_infer_request()
            blocks[f"openvino {openvino.__version__.split('-')[0]}, batch {batch}"] = serially(
                lambda x, request=request: request.infer({0: x}), batch)
    for block in blocks.values():  # warm-up
        block()
    figures = {name: [] for name in blocks}
    for _ in range(rounds):
        for name, block in blocks.items():
            figures[name].append(block())
    return {name: statistics.median(values) for name, values in figures.items()}


def print_ceiling(name: str, ceiling: dict) -> None:
    best = max(ceiling.values())
    print(f"# {name}: the engine alone in process, images/s (no server can pass the best "
          f"once compute fills the cores; load average {os.getloadavg()[0]:.2f})")
    for setting, value in ceiling.items():
        print(f"#   {setting:<48}{value:>10,.1f}{'  <- best' if value == best else ''}")


def print_table(rows: list, results: dict, scaling: bool = False) -> None:
    print(f"\n{'model':<10}{'protocol':<12}{'c':>3}  {'server':<20}{'driver':<14}"
          f"{'infer/s':>9}{'p50 ms':>9}{'p99 ms':>9}  flowserve / it")
    for row in rows:
        here = {k[3:]: median_figures(v) for k, v in results.items()
                if k[:3] == (row.model, row.protocol, row.concurrency)}
        ratios = []
        for (name, driver), f in sorted(here.items(), key=lambda kv: kv[0][1]):
            ours = here.get(("flowserve", driver))
            ratio = ""
            if name != "flowserve" and ours:
                ratio = f"{ours['throughput'] / f['throughput']:.2f}x"
            if name != "flowserve" and ours and name != BASELINE:
                ratios.append((ours["throughput"] / f["throughput"], name, driver,
                               ours["p99_us"] <= f["p99_us"]))
            print(f"{row.model:<10}{row.protocol:<12}{row.concurrency:>3}  {name:<20}{driver:<14}"
                  f"{f['throughput']:>9,.1f}{f['p50_us'] / 1e3:>9.2f}{f['p99_us'] / 1e3:>9.2f}"
                  f"  {ratio}")
        if ratios and scaling:
            print(f"{'':<25}-> 2 workers / 1 worker {1 / ratios[0][0]:.2f}x")
        elif ratios:
            ratio, name, driver, p99_ok = min(ratios)
            goal = 1.5 if row.concurrency == 1 else 1.1
            verdict = "met" if ratio >= goal and (row.concurrency != 32 or p99_ok) else "NOT met"
            p99 = f", p99 {'<=' if p99_ok else '>'} its p99" if row.concurrency == 32 else ""
            print(f"{'':<25}-> flowserve / best peer ({name}, {driver}) {ratio:.2f}x{p99}; "
                  f"goal >= {goal}x: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cudart-dir", help="folder holding libcudart.so.12 (perf_analyzer)")
    parser.add_argument("--pytriton-python",
                        default=os.environ.get("PYTRITON_PYTHON", "/tmp/venv-pytriton/bin/python"))
    parser.add_argument("--mlserver-python",
                        default=os.environ.get("MLSERVER_PYTHON", "/tmp/venv-mlserver/bin/python"))
    parser.add_argument("--baseline-python",
                        help="also measure the flowserve of this Python's environment (another "
                             "commit, installed with pip -e in a venv of its own) in every row")
    parser.add_argument("--peers", type=lambda text: text.split(","),
                        help="comma-separated first words of the peers to run: triton, "
                             "mlserver, plain (default: all)")
    parser.add_argument("--interval-ms", type=int, default=1000,
                        help="measurement window (perf_analyzer runs 3; MobileNet's 3x as long)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true",
                        help="concurrency 1 and 32, HTTP JSON and gRPC only")
    parser.add_argument("--models", default="mlp,mobilenet")
    parser.add_argument("--protocols", help="comma-separated, of " + ", ".join(PROTOCOLS)
                        + " (default: all; --quick: http-json,grpc)")
    parser.add_argument("--concurrencies", help="comma-separated (default 1,8,32; --quick: 1,32)")
    parser.add_argument("--workers-scaling", action="store_true",
                        help="flowserve --workers 1 against 2 on the MLP, HTTP binary and gRPC")
    args = parser.parse_args()
    if args.workers_scaling:
        args.models = "mlp"
    env = dict(os.environ)
    if args.cudart_dir:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (args.cudart_dir, env.get("LD_LIBRARY_PATH")) if p)
    have_pa = shutil.which("perf_analyzer") is not None
    if not have_pa:
        print("# perf_analyzer not found: every server is driven by clients/perf.py")
    protocols = ("http-json", "grpc") if args.quick else PROTOCOLS
    if args.workers_scaling:
        protocols = ("http-binary", "grpc")
    concurrencies = (1, 32) if args.quick else CONCURRENCIES
    if args.protocols:
        protocols = tuple(args.protocols.split(","))
        unknown = set(protocols) - set(PROTOCOLS)
        if unknown:
            parser.error(f"--protocols: {sorted(unknown)} not among {PROTOCOLS}")
    if args.concurrencies:
        concurrencies = tuple(int(c) for c in args.concurrencies.split(","))
    names = args.models.split(",")
    rows = [Row(m, p, c) for m in names for p in protocols for c in concurrencies]
    chosen = servers(args)
    peers_by_driver = {}
    for server in chosen[1:]:
        for protocol in server.protocols:
            for driver in drivers_of(server, protocol, {}, have_pa):
                peers_by_driver[(protocol, driver)] = True
    plan = {(s.name, p): drivers_of(s, p, peers_by_driver, have_pa)
            for s in chosen for p in s.protocols}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        models = {"mlp": mlp_model((784, 512, 512, 10)), "mobilenet": mobilenet_v2_model()}
        paths, inputs, expected = {}, {}, {}
        rng = np.random.default_rng(0)
        for name in names:
            paths[name] = workdir / f"{name}.onnx"
            onnx.save(models[name], paths[name])
            shape = (1, 784) if name == "mlp" else (1, 3, 224, 224)
            inputs[name] = rng.standard_normal(shape).astype(np.float32)
            session = ort.InferenceSession(str(paths[name]), providers=["CPUExecutionProvider"])
            expected[name] = session.run(None, {"x": inputs[name]})[0]
            if not args.workers_scaling:
                print_ceiling(name, engine_ceiling(models[name], inputs[name]))
        for number in range(args.rounds):
            order = chosen if number % 2 == 0 else chosen[::-1]
            print(f"# round {number + 1}/{args.rounds}, load average "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
            for server in order:
                try:
                    run_round(server, rows, paths, inputs, expected, results, plan, args, env,
                              workdir)
                except (OSError, RuntimeError, AssertionError) as exc:  # the others go on
                    print(f"# {server.name} left out of this round: {exc}", flush=True)
    print_table(rows, results, args.workers_scaling)
    print(f"# load average {' '.join(f'{v:.2f}' for v in os.getloadavg())} "
          f"(1, 5, 15 min) on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()

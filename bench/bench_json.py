"""JSON tensors over HTTP: this tree's codecs against those of a baseline commit, same run.

In process (medians of interleaved rounds, and the ratio of their minimums): the client's encode of an infer request, the
server's decode of it (each side's client writes its own body: the baseline's floats have 9
digits, this tree's the 17 of their float64 value), of the same body of 17-digit
floats (``json.dumps`` of ``tolist()``, as tritonclient writes) and of random float32 bit
patterns written so (as perf_analyzer's random data: ``NaN`` and ``Infinity`` literals,
exponents up to 38, subnormals), the server's encode of
the answer and the client's decode of it, for
the MLP input (784 floats), the MobileNetV2-224 input (150,528 floats) and a 150,528-float
output. With ``--e2e``, both trees also serve MobileNetV2-224 (random weights) and the
project's load generator drives each at concurrency 1 with JSON tensors, rounds
interleaved, each side with its own client::

    python bench/bench_json.py --baseline main --e2e --seconds 5
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
# role -> the file holding it; a baseline ref must have this layout (server/http/, flowserve/protocol/):
# for an older ref, run this script from a checkout of that ref instead
CODEC_FILES = {"server codec": "server/http/codec.py",
               "server json arrays": "server/http/json_arrays.py",
               "client tensors": "clients/tensors.py",
               "client rest": "clients/rest.py"}


def _module(path: str) -> str:
    """``server/http/codec.py`` -> ``server.http.codec`` (relative to the installed package)."""
    return path[:-3].replace("/", ".")


def baseline_codecs(ref: str, root: pathlib.Path) -> dict:
    """The baseline's codec modules, imported beside this tree's other modules: relative
    imports of another codec file go to the baseline's copy, the rest to this tree."""
    package = root / "baseline_codecs"
    copied = {_module(p) for p in CODEC_FILES.values()}
    for path in CODEC_FILES.values():
        shown = subprocess.run(["git", "-C", str(REPO), "show", f"{ref}:{path}"], capture_output=True, text=True)
        if shown.returncode != 0:
            raise SystemExit(f"--baseline {ref} has no {path} (an older layout): run this script "
                             f"from a checkout of {ref} to measure it")
        here = _module(path).split(".")[:-1]

        def absolute(match, here=here):
            dots, name = len(match.group(1)), match.group(2)
            target = ".".join(here[:len(here) - dots + 1] + [name])
            return f"from {'baseline_codecs' if target in copied else 'flowserve'}.{target} import"

        target = package / path
        for folder in [target.parent, *target.parent.parents]:
            if folder == root:
                break
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "__init__.py").touch()
        target.write_text(re.sub(r"^from (\.+)([\w.]+) import", absolute, shown.stdout, flags=re.M))
    sys.path.insert(0, str(root))
    return {role: importlib.import_module("baseline_codecs." + _module(path)) for role, path in CODEC_FILES.items()}


def current_codecs() -> dict:
    return {role: importlib.import_module("flowserve." + _module(path)) for role, path in CODEC_FILES.items()}


def phases(codecs: dict, size: int, output_size: int) -> dict:
    """``{phase: call}`` for one request of ``size`` floats answered by ``output_size``."""
    from flowserve.server.dataplane import InferenceResponse

    rng = np.random.default_rng(size)
    x = rng.standard_normal((1, size)).astype(np.float32)
    y = rng.standard_normal((1, output_size)).astype(np.float32)
    rest, server = codecs["client rest"], codecs["server codec"]
    body, _ = rest.encode_infer({"x": x}, binary=False)
    response = InferenceResponse("m", "1", {"y": y})
    answer, _ = server.encode_infer_response(response, {})
    text = json.dumps({"inputs": [{"name": "x", "shape": [1, size], "datatype": "FP32",
                                   "data": x.reshape(-1).tolist()}]}).encode()
    bits = rng.integers(0, 2**32, size, dtype=np.uint64).astype(np.uint32).view(np.float32)
    random_bits = json.dumps({"inputs": [{"name": "x", "shape": [1, size], "datatype": "FP32",
                                          "data": bits.tolist()}]}).encode()
    return {
        "client encode": lambda: rest.encode_infer({"x": x}, binary=False),
        "server decode": lambda: server.decode_infer_request(body, None, "m"),
        "server decode, 17 digits": lambda: server.decode_infer_request(text, None, "m"),
        "server decode, random bits": lambda: server.decode_infer_request(random_bits, None, "m"),
        "server encode": lambda: server.encode_infer_response(response, {}),
        "client decode": lambda: rest.decode_infer(200, None, answer),
    }


def in_process(codecs: dict, rounds: int) -> list:
    cases = [("MLP input 784, output 10", 784, 10), ("image input 150,528, output 1000", 150_528, 1000),
             ("output 150,528 (input 784)", 784, 150_528)]
    rows = []
    for case, size, output_size in cases:
        calls = {side: phases(c, size, output_size) for side, c in codecs.items()}
        times = {(side, phase): [] for side in calls for phase in calls[side]}
        repeat = max(1, 20_000 // max(size, output_size))
        for _ in range(rounds):
            for phase in calls["new"]:
                for side in calls:  # interleaved: one round of each side, then the next
                    started = time.perf_counter()
                    for _ in range(repeat):
                        calls[side][phase]()
                    times[side, phase].append((time.perf_counter() - started) / repeat * 1e6)
        for phase in calls["new"]:
            old, new = (statistics.median(times[s, phase]) for s in ("old", "new"))
            fastest = min(times["old", phase]) / min(times["new", phase])
            rows.append((case, phase, old, new, fastest))
        old, new = (sum(statistics.median(times[s, p]) for p in ("server decode", "server encode"))
                    for s in ("old", "new"))
        fastest = (sum(min(times["old", p]) for p in ("server decode", "server encode"))
                   / sum(min(times["new", p]) for p in ("server decode", "server encode")))
        rows.append((case, "server decode + encode", old, new, fastest))
    return rows


def package_tree(ref: str, root: pathlib.Path) -> pathlib.Path:
    """A ``flowserve`` package of commit ``ref`` importable by PYTHONPATH (ahead of the
    editable install of this tree)."""
    tree = root / "tree"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    package = root / "path" / "flowserve"
    package.mkdir(parents=True)
    for entry in (tree / "flowserve").iterdir():
        (package / entry.name).symlink_to(entry)
    for folder in ("server", "clients", "exporter"):
        (package / folder).symlink_to(tree / folder)
    return root / "path"


LOAD = """
import asyncio, json, sys
import numpy as np
from flowserve.clients.perf import run_load
x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
report = asyncio.run(run_load(sys.argv[1], "mobilenet", 1, float(sys.argv[2]), "http", False,
                              inputs={"x": x}, warmup_s=1.0))
assert not report.errors, report.first_error
import flowserve.clients.tensors as tensors
print(json.dumps([report.percentile_ms(50), report.percentile_ms(99), report.throughput,
                  tensors.__file__]))
"""


def end_to_end(ref: str, root: pathlib.Path, seconds: float, rounds: int) -> dict:
    sys.path.insert(0, str(HERE))
    from bench_serving import free_port, mobilenet_v2_model, start

    repository = root / "repository" / "mobilenet" / "1"
    repository.mkdir(parents=True)
    import onnx

    onnx.save(mobilenet_v2_model(), repository / "model.onnx")
    (repository.parent / "config.json").write_text(json.dumps({"max_batch_size": 32}))
    envs = {"new": dict(os.environ), "old": {**os.environ, "PYTHONPATH": str(package_tree(ref, root))}}
    servers, urls, results = {}, {}, {"old": [], "new": []}
    try:
        for side, env in envs.items():
            port = free_port()
            urls[side] = f"http://127.0.0.1:{port}"
            command = [sys.executable, "-m", "flowserve.server", str(root / "repository"),
                       "--http-port", str(port), "--grpc-port", str(free_port()),
                       "--log-level", "warning"]
            servers[side] = _start_with(start, command, urls[side], env, root)
        for _ in range(rounds):
            for side in ("old", "new"):
                out = subprocess.run([sys.executable, "-c", LOAD, urls[side], str(seconds)],
                                     env=envs[side], cwd=root, check=True, capture_output=True,
                                     text=True)
                results[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        for process in servers.values():
            process.terminate()
            process.wait(10)
    return results


def _start_with(start, command, url, env, cwd):
    """``start`` in ``env`` and ``cwd`` (not this tree's root, whose ``flowserve`` folder
    ``python -m`` would import ahead of PYTHONPATH)."""
    saved, here = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        return start(command, url)
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="main", help="git ref of the old codecs")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--e2e", action="store_true", help="also serve MobileNetV2 from both")
    parser.add_argument("--seconds", type=float, default=5.0, help="each e2e load")
    parser.add_argument("--e2e-rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        codecs = {"old": baseline_codecs(args.baseline, root), "new": current_codecs()}
        print(f"{'case':<34} {'phase':<26} {args.baseline + ' us':>12} {'this tree us':>12} "
              f"{'old/new':>8} {'of minimums':>12}")  # the minimums: steadier on a busy machine
        for case, phase, old, new, fastest in in_process(codecs, args.rounds):
            print(f"{case:<34} {phase:<26} {old:>12,.0f} {new:>12,.0f} {old / new:>7.1f}x "
                  f"{fastest:>11.1f}x", flush=True)
        if args.e2e:
            results = end_to_end(args.baseline, root, args.seconds, args.e2e_rounds)
            print(f"\nMobileNetV2-224, HTTP JSON, c=1, flowserve perf ({args.e2e_rounds} "
                  f"interleaved rounds of {args.seconds:g} s; per round p50 ms)")
            for side in ("old", "new"):
                p50s = [r[0] for r in results[side]]
                print(f"  {side:<4} p50 {statistics.median(p50s):7.1f} ms  rounds "
                      + " ".join(f"{v:.1f}" for v in p50s)
                      + f"  p99 {statistics.median(r[1] for r in results[side]):.1f} ms")
            assert results["old"][0][3] != results["new"][0][3], "both sides ran one client"
            ratio = [o[0] / n[0] for o, n in zip(results["old"], results["new"])]
            print(f"  old p50 / new p50 per round: " + " ".join(f"{r:.2f}" for r in ratio))


if __name__ == "__main__":
    main()

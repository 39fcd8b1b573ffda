"""The deployment examples run as a user would run them (the graph examples are run in
tests/graph/test_graph_seeds.py and tests/test_skeleton_examples.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
@pytest.mark.parametrize("script", ["export_mobilenet.py", "serve_and_query.py", "verified_int8.py", "qat_mobilenet.py",
                                    "serve_workers.py", "serve_tls.py",
                                    "compressed_requests.py", "shared_memory.py", "gpu_train_and_serve.py"])
def test_example_runs(script, tmp_path):
    done = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip(), "the example printed nothing"


def test_autograd_example_runs(tmp_path):
    script = EXAMPLES / "autograd_and_threads.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "untouched by autograd.grad: True" in done.stdout and "tanh'' (0.5) = -0.7269" in done.stdout
    assert "main thread still records gradients: True" in done.stdout


@pytest.mark.slow
def test_data_parallel_example_trains_with_two_processes(tmp_path):
    from tests.distributed.helpers import free_port

    done = subprocess.run([sys.executable, "-m", "flowserve.distributed.launch", "--nproc_per_node", "2",
                           "--master_port", str(free_port()), "--timeout", "60",
                           str(EXAMPLES / "train_data_parallel.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    losses = [float(line.split("loss ")[1].split()[0]) for line in done.stdout.splitlines() if line.startswith("epoch")]
    assert len(losses) == 3 and losses[-1] < losses[0], done.stdout
    assert (tmp_path / "convnet" / "flowserve.json").is_file()


@pytest.mark.parametrize("nproc", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_global_tensor_example_matches_numpy(nproc, tmp_path):
    from tests.distributed.helpers import free_port

    script = str(EXAMPLES / "global_tensor_mlp.py")
    command = [sys.executable, script] if nproc == 1 else [
        sys.executable, "-m", "flowserve.distributed.launch", "--nproc_per_node", str(nproc),
        "--master_port", str(free_port()), "--timeout", "60", script]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"{nproc} process(es): losses match single-process numpy: True" in done.stdout


def test_ctc_example_trains_decodes_and_exports(tmp_path):
    done = subprocess.run([sys.executable, str(EXAMPLES / "ctc_graph_train.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    losses = [float(line.split("ctc loss ")[1]) for line in done.stdout.splitlines() if "ctc loss" in line]
    assert losses[-1] < 0.1 * losses[0], done.stdout
    right = int(done.stdout.split("greedy decoding: ")[1].split("/")[0])
    assert right >= 28, done.stdout
    manifest = (tmp_path / "labeller" / "flowserve.json").read_text()
    assert '"batch_note": null' in manifest and (tmp_path / "labeller.onnx").is_file()


def test_lbfgs_time_sequence_example_learns(tmp_path):
    done = subprocess.run([sys.executable, str(EXAMPLES / "lbfgs_time_sequence.py"), "--steps", "2"],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "10 steps ahead" in done.stdout and done.stdout.strip().endswith("True")

"""``flow.save`` of a graph replaces the target atomically and cleans up after killed saves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import flowserve as flow
from flowserve.serialization import graph_dir
from tests.exporter.helpers import called_graph, mlp


def _saved_files(directory):
    return sorted(p.name for p in directory.iterdir())


def test_a_crash_right_after_the_first_rename_leaves_a_complete_target(tmp_path, monkeypatch):
    target = tmp_path / "mlp"
    flow.save(called_graph(mlp(), 2, 6), target)
    real_rename = os.rename

    def rename_then_die(src, dst):
        real_rename(src, dst)
        raise KeyboardInterrupt("killed between renames")

    monkeypatch.setattr(graph_dir.os, "rename", rename_then_die)
    try:
        flow.save(called_graph(mlp(), 2, 6), target)
    except KeyboardInterrupt:
        pass
    monkeypatch.undo()
    # a called inference graph stores its last calls as reference examples (examples/)
    assert _saved_files(target) == ["examples", "flowserve.json", "graph.json", "params.safetensors"]
    flow.load(target)  # checksums and all


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_the_next_save_removes_temporaries_of_killed_saves_only(tmp_path):
    target = tmp_path / "mlp"
    flow.save(called_graph(mlp(), 2, 6), target)
    dead = _dead_pid()
    stale = [tmp_path / f".mlp.tmp-{dead}-abc123", tmp_path / f".mlp.old-{dead}"]
    for folder in stale:
        folder.mkdir()
        (folder / "graph.json").write_text("{}")
        (folder / "params.safetensors").write_bytes(b"x" * 1000)
    alive = tmp_path / f".mlp.tmp-{os.getppid()}-busy"  # a save still running elsewhere
    alive.mkdir()
    foreign = tmp_path / f".mlp.old-{dead}-notes"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a saved graph: left alone")
    flow.save(called_graph(mlp(), 2, 6), target)
    assert not any(folder.exists() for folder in stale)
    assert alive.exists() and (foreign / "notes.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".mlp.old-%d-notes" % dead, alive.name, "mlp"])


@pytest.mark.slow
def test_saves_killed_at_random_moments_never_lose_the_target(tmp_path):
    """A child process saves in a loop; it is killed 8 times at varying moments."""
    target = tmp_path / "mlp"
    script = textwrap.dedent(f"""
        import flowserve as flow
        from tests.exporter.helpers import called_graph, mlp
        graph = called_graph(mlp(), 2, 6)
        print("ready", flush=True)
        while True:
            flow.save(graph, {str(target)!r})
    """)
    rng = np.random.default_rng(0)
    for _ in range(8):
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                 cwd=os.getcwd())
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(float(rng.uniform(0.01, 0.2)))
        child.send_signal(signal.SIGKILL)
        child.wait()
        if target.exists():
            flow.load(target)
    flow.save(called_graph(mlp(), 2, 6), target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp"]

"""The model control journal of ``--workers N`` as one worker sees it: it follows the other
workers' whole lines in order (a model ends in the state of its last line), skips lines
that are not journal entries with a warning, leaves a line still being written for the
next round, and says how far it has read. The workers themselves: ``test_workers.py``."""

from __future__ import annotations

import asyncio
import json
import logging

from flowserve.server import ServerSettings
from flowserve.server.control import JOURNAL, ModelControl, acknowledgement
from flowserve.server.repository import ModelRepository

from .models import write_repository

OTHER = 1  # the process id the other worker's lines carry (init's: never this test's)


def line(action: str, model: str) -> str:
    return json.dumps({"action": action, "model": model, "worker": OTHER}) + "\n"


def states(repository: ModelRepository) -> dict:
    return {row.name: row.state for row in repository.index() if row.name in ("mlp", "types")}


def test_a_worker_follows_the_other_workers_lines(tmp_path, caplog):
    shared = tmp_path / "shared"
    shared.mkdir()
    settings = ServerSettings(model_path=str(write_repository(tmp_path / "repo")), log_level="warning",
                              shared_metrics_dir=str(shared), allow_model_control=True)
    journal = shared / JOURNAL
    whole = line("unload", "mlp") + "not a journal line\n" + line("unload", "types") + line("load", "types")
    partial = line("unload", "types")

    async def scenario() -> list:
        repository = ModelRepository(settings)
        control = ModelControl(repository, settings)
        await control.start()
        seen = [states(repository)]
        journal.write_text(whole + partial[:20])  # the last line is still being written
        follower = asyncio.create_task(control.follow(every_s=0.01))
        await asyncio.sleep(0.5)
        seen.append(states(repository))
        seen.append(json.loads(acknowledgement(shared, control.worker).read_text())["offset"])
        with open(journal, "a") as file:
            file.write(partial[20:])
        await asyncio.sleep(0.5)
        seen.append(states(repository))
        follower.cancel()
        await repository.close()
        return seen

    with caplog.at_level(logging.WARNING, logger="flowserve.server"):
        started, followed, offset, completed = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert started == {"mlp": "READY", "types": "READY"}
    assert followed == {"mlp": "UNAVAILABLE", "types": "READY"}  # types: its last whole line loads it
    assert offset == len(whole.encode())
    assert completed == {"mlp": "UNAVAILABLE", "types": "UNAVAILABLE"}
    assert any("malformed model control line" in r.getMessage() for r in caplog.records)

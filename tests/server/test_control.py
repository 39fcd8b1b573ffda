"""The model control journal of ``--workers N`` as one worker sees it: it follows the other
workers' whole lines in order (a model ends in the state of its last line), skips lines
that are not journal entries with a warning, leaves a line still being written for the
next round, and says how far it has read. The journal is compacted past a size into one
line per model, and a worker follows it across that as if it had read the old one to its
end. The workers themselves: ``test_workers.py``."""

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


def _two_workers(tmp_path, compact_at_bytes: int, sync_timeout_s: float = 30):
    """This worker (``control``) and a peer (``peer``, whose lines and acknowledgement carry
    ``OTHER``) over one repository folder and one shared folder."""
    shared = tmp_path / "shared"
    shared.mkdir()
    settings = ServerSettings(model_path=str(write_repository(tmp_path / "repo")), log_level="warning",
                              shared_metrics_dir=str(shared), allow_model_control=True,
                              model_control_sync_timeout_s=sync_timeout_s)
    repositories = [ModelRepository(settings), ModelRepository(settings)]
    control = ModelControl(repositories[0], settings, compact_at_bytes=compact_at_bytes)
    peer = ModelControl(repositories[1], settings, compact_at_bytes=compact_at_bytes)
    peer.worker = OTHER
    return shared / JOURNAL, control, peer


def _generation(journal) -> int:
    first = json.loads(journal.read_bytes().splitlines()[0])
    return first.get("generation", 0)


def test_the_journal_stays_bounded_and_a_following_worker_ends_in_the_same_state(tmp_path):
    journal, control, peer = _two_workers(tmp_path, compact_at_bytes=600)

    async def scenario() -> tuple:
        await control.start()
        await peer.start()
        follower = asyncio.create_task(peer.follow(every_s=0.005))
        sizes = []
        for i in range(40):
            name = ("mlp", "types")[i % 2]
            await (control.unload(name) if i % 4 < 2 else control.load(name))
            sizes.append(journal.stat().st_size)
        await control.unload("types")
        sizes.append(journal.stat().st_size)
        await asyncio.sleep(0.2)
        follower.cancel()
        result = states(control.repository), states(peer.repository), sizes, _generation(journal)
        await control.repository.close()
        await peer.repository.close()
        return result

    mine, theirs, sizes, generation = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert mine == theirs == {"mlp": "READY", "types": "UNAVAILABLE"}
    assert generation >= 3 and max(sizes) <= 600 + 100  # compacted past 600 bytes, never more than a line over



async def _stop_following(control, peer, follower, generation) -> tuple:
    """Stop ``peer``'s follower, close both repositories; both workers' model states and the
    journal's generation."""
    follower.cancel()
    result = states(control.repository), states(peer.repository), generation
    await control.repository.close()
    await peer.repository.close()
    return result

def test_a_worker_that_followed_takes_only_the_lines_it_had_not_read_from_a_compacted_journal(tmp_path):
    journal, control, peer = _two_workers(tmp_path, compact_at_bytes=300)
    history = "".join(line(action, name) for action, name in
                      [("unload", "mlp"), ("load", "mlp"), ("unload", "types"), ("load", "types")] * 2)
    journal.write_text(history)  # the peer's own earlier requests
    done = []

    def spy(action, act):
        async def call(name):
            done.append((action, name))
            return await act(name)
        return call

    async def scenario() -> tuple:
        await control.start()
        await peer.start()
        peer.repository.load = spy("load", peer.repository.load)
        peer.repository.unload = spy("unload", peer.repository.unload)
        follower = asyncio.create_task(peer.follow(every_s=0.005))
        await control.unload("mlp")  # past 300 bytes: compacted into one line per model
        generation = _generation(journal)
        await asyncio.sleep(0.1)
        return await _stop_following(control, peer, follower, generation)

    mine, theirs, generation = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert generation == 1 and len(journal.read_text().splitlines()) == 3  # a header and two models
    assert mine == theirs == {"mlp": "UNAVAILABLE", "types": "READY"}
    assert done == [("unload", "mlp")]  # not the loads it had followed before the compaction


def test_a_worker_that_missed_generations_catches_up_from_the_snapshot(tmp_path):
    journal, control, peer = _two_workers(tmp_path, compact_at_bytes=200, sync_timeout_s=0.05)  # it does not follow

    async def scenario() -> tuple:
        await control.start()
        await peer.start()
        for i in range(12):
            name = ("mlp", "types")[i % 2]
            await (control.unload(name) if i % 4 < 2 else control.load(name))
        await control.unload("mlp")
        generation = _generation(journal)
        follower = asyncio.create_task(peer.follow(every_s=0.005))  # from the journal's latest generation
        await asyncio.sleep(0.2)
        return await _stop_following(control, peer, follower, generation)

    mine, theirs, generation = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert generation >= 2
    assert mine == theirs == {"mlp": "UNAVAILABLE", "types": "READY"}

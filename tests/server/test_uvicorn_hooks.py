"""uvicorn's private request-cycle hooks that ``server.app.NoDelayHTTPProtocol`` and its infer
fast path (``_answer_infer``, ``_receive_sunk``) override or use are still there, with the
signatures and attributes they rely on, in the uvicorn ``pyproject.toml`` pins. A uvicorn
release that changes any of them fails here, not in production."""

from __future__ import annotations

import asyncio
import inspect
import pathlib
import re

import uvicorn
from packaging.requirements import Requirement
from uvicorn.config import Config
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from flowserve.server.app import NoDelayHTTPProtocol

PYPROJECT = pathlib.Path(__file__).parents[2] / "pyproject.toml"

# methods the protocol overrides or calls, with the parameters it passes them
PROTOCOL_METHODS = {
    "__init__": ["config", "server_state", "app_state", "_loop"],
    "connection_made": ["transport"], "connection_lost": ["exc"], "data_received": ["data"],
    "on_headers_complete": [], "on_body": ["body"], "on_message_complete": [],
    "_start_asgi_task": ["cycle", "app"], "on_response_complete": [],
}
# what a connection has once made: the parser, the current cycle, the server's task set…
PROTOCOL_ATTRIBUTES = ("app", "loop", "parser", "cycle", "tasks", "transport", "flow", "pipeline")
# what the fast path reads and sets on a request cycle
CYCLE_ATTRIBUTES = ("scope", "transport", "flow", "default_headers", "message_event", "on_response",
                    "disconnected", "keep_alive", "waiting_for_100_continue", "response_started",
                    "response_complete", "body", "more_body")


def test_uvicorn_is_a_version_pyproject_pins():
    pins = [Requirement(line.split("#")[0].strip().strip('",'))
            for line in PYPROJECT.read_text().splitlines() if line.strip().startswith('"uvicorn')]
    assert len(pins) == 1 and pins[0].specifier, "pin uvicorn: server.app overrides its internals"
    assert any(s.operator in ("<", "<=", "==", "~=") for s in pins[0].specifier), \
        f"{pins[0]}: bound uvicorn above too (versions the hooks were checked with)"
    assert uvicorn.__version__ in pins[0].specifier, (uvicorn.__version__, str(pins[0].specifier))


def test_the_protocol_is_httptools_and_overrides_what_exists():
    assert AutoHTTPProtocol is HttpToolsProtocol  # uvicorn[standard] brings httptools
    assert issubclass(NoDelayHTTPProtocol, HttpToolsProtocol)
    for name, parameters in PROTOCOL_METHODS.items():
        method = getattr(HttpToolsProtocol, name)
        assert list(inspect.signature(method).parameters)[1:] == parameters, name


def test_uvicorn_starts_each_request_through_start_asgi_task():
    """The fast path takes over each request (pipelined ones too) in ``_start_asgi_task``,
    and needs ``on_headers_complete`` to make the cycle first (``on_body`` fills it)."""
    for caller in (HttpToolsProtocol.on_headers_complete, HttpToolsProtocol.on_response_complete):
        assert "self._start_asgi_task(" in inspect.getsource(caller), caller.__name__
    assert "self.cycle = RequestResponseCycle(" in inspect.getsource(
        HttpToolsProtocol.on_headers_complete)
    assert "self.cycle.body += body" in inspect.getsource(HttpToolsProtocol.on_body)
    assert httptools_impl.HIGH_WATER_LIMIT == 64 * 1024  # server.http.app.SINK_MIN_BYTES


def test_a_connection_and_a_cycle_have_the_attributes_the_fast_path_uses():
    async def made():
        config = Config(app=lambda scope, receive, send: None, http="httptools")
        config.load()
        protocol = HttpToolsProtocol(config=config, server_state=ServerState(), app_state={},
                                     _loop=asyncio.get_running_loop())  # as _Uvicorn makes it
        transport = _Transport()
        protocol.connection_made(transport)
        cycle = RequestResponseCycle(
            scope={}, transport=transport, flow=FlowControl(transport), logger=protocol.logger,
            access_logger=protocol.access_logger, access_log=False, default_headers=[],
            message_event=asyncio.Event(), expect_100_continue=False, keep_alive=True,
            on_response=lambda: None)
        return protocol, cycle

    protocol, cycle = asyncio.run(made())
    missing = [a for a in PROTOCOL_ATTRIBUTES if not hasattr(protocol, a)]
    missing += [f"cycle.{a}" for a in CYCLE_ATTRIBUTES if not hasattr(cycle, a)]
    assert not missing, missing
    assert inspect.iscoroutinefunction(RequestResponseCycle.receive)
    assert {"read_paused", "write_paused"} <= set(vars(cycle.flow))
    assert inspect.iscoroutinefunction(FlowControl.drain)
    source = inspect.getsource(RequestResponseCycle.receive)  # 100 Continue, then the body
    assert re.search(r"waiting_for_100_continue", source) and "more_body" in source


class _Transport:
    """Enough of a transport for ``connection_made``."""

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)

    def is_closing(self):
        return False

"""Remote MCP tools in the session core: hosts the operator allows, secrets never echoed, the list
item's life, and approvals only for a pending request (``voice/mcp.py``, ``voice/mcp_tools.py``)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from livegen.errors import RemoteProtocolError
from livegen.models.voice import OutputKind, VoiceOutput
from livegen.protocol import realtime as wire
from livegen.protocol.realtime.server import encode
from livegen.voice.chain import Run, Send
from livegen.voice.session import Session
from livegen.voice.settings import Limits, ModelFacts
from voice.drive import drive

URL = "http://tools.internal:8080/mcp"
TOOL = {
    "type": "mcp",
    "server_label": "kb",
    "server_url": URL,
    "require_approval": "never",
    "headers": {"X-Key": "s3cret-header"},
    "authorization": "s3cret-token",
}


def _session(hosts: tuple[str, ...] = ("tools.internal:8080",)) -> Session:
    counter = itertools.count()
    session = Session(
        "s",
        ModelFacts("m", 24_000, 24_000, False),
        lambda p: f"{p}_{next(counter)}",
        Limits(mcp_allowed_hosts=hosts),
    )
    drive(session.open, 0.0)
    return session


def _types(effects: list[Any]) -> list[str]:
    return [e.type for e in effects if isinstance(e, Send)]


@pytest.mark.parametrize("hosts", [(), ("tools.internal:9999",), ("other.internal",)])
def test_a_server_url_on_a_host_not_allowed_is_refused_naming_the_option(hosts: tuple[str, ...]) -> None:
    session = _session(hosts)
    before = session.config
    with pytest.raises(RemoteProtocolError) as caught:
        drive(session.receive, wire.session_update({"tools": [TOOL]}), 0.0)
    assert (caught.value.code, caught.value.param) == ("invalid_value", "session.tools")
    assert "--mcp-allowed-hosts" in str(caught.value)
    assert session.config == before


def test_the_session_echoes_the_server_without_its_secrets_and_gives_the_model_them() -> None:
    session = _session(("tools.internal",))
    effects = drive(session.receive, wire.session_update({"tools": [TOOL]}), 0.0)
    wire_bytes = b"".join(encode(e.event) for e in effects if isinstance(e, Send))
    assert b"s3cret" not in wire_bytes
    (update,) = [e.attempt for e in effects if isinstance(e, Run)]
    assert update.config is not None
    (server,) = update.config.mcp_servers
    assert dict(server.headers) == {"X-Key": "s3cret-header", "Authorization": "Bearer s3cret-token"}
    assert "s3cret" not in repr(server)
    assert _types(effects)[-2:] == ["conversation.item.added", "mcp_list_tools.in_progress"]
    # The same server again keeps its list; listing is not repeated.
    again = drive(session.receive, wire.session_update({"tools": [TOOL], "instructions": "Hi."}), 0.0)
    assert "mcp_list_tools.in_progress" not in _types(again)


def test_a_listing_completes_its_item_once_whatever_the_epoch() -> None:
    session = _session()
    effects = drive(session.receive, wire.session_update({"tools": [TOOL]}), 0.0)
    (server,) = next(e.attempt for e in effects if isinstance(e, Run)).config.mcp_servers  # type: ignore[union-attr]
    tools = '[{"name": "search", "description": "Search.", "input_schema": {"type": "object"}}]'
    listed = VoiceOutput(OutputKind.MCP_TOOLS_LISTED, epoch=-5, item_id=server.list_item_id, text=tools)
    done = drive(session.on_output, listed, 0.1)
    assert _types(done) == ["mcp_list_tools.completed", "conversation.item.done"]
    assert drive(session.on_output, listed, 0.2) == []  # a second report changes nothing
    assert session.conversation.get(server.list_item_id).to_wire()["tools"][0]["name"] == "search"


def test_an_approval_response_must_answer_a_pending_request() -> None:
    session = _session()
    item = {"type": "mcp_approval_response", "approval_request_id": "mcpr_nope", "approve": True}
    before = len(session.conversation.history())
    with pytest.raises(RemoteProtocolError) as caught:
        drive(session.receive, wire.ItemCreate(item=item), 0.0)
    assert (caught.value.code, caught.value.param) == ("invalid_value", "item.approval_request_id")
    assert len(session.conversation.history()) == before


def _refused(session: Session, tools: list[dict[str, Any]]) -> RemoteProtocolError:
    before = session.config
    with pytest.raises(RemoteProtocolError) as caught:
        drive(session.receive, wire.session_update({"tools": tools}), 0.0)
    assert session.config == before
    return caught.value


@pytest.mark.parametrize(
    "url",
    [
        "http://tools.internal:99999/mcp",
        "http://tools.internal:8o80/mcp",
        "http://[::1/mcp",
        "http://[fe80::1%25eth0/mcp",
        "http://tools.internal:0/mcp",
    ],
)
def test_a_server_url_with_a_bad_port_or_a_broken_ipv6_literal_is_invalid_value_naming_it(url: str) -> None:
    error = _refused(_session(), [{**TOOL, "server_url": url}])
    assert (error.code, error.param) == ("invalid_value", "session.tools[0].server_url")


@pytest.mark.parametrize(
    "url", ["http://me:pa55word@tools.internal:8080/mcp", "http://me@tools.internal:8080/mcp"]
)
def test_a_server_url_with_userinfo_is_refused_pointing_to_authorization(url: str) -> None:
    error = _refused(_session(), [{**TOOL, "server_url": url}])
    assert (error.code, error.param) == ("invalid_value", "session.tools[0].server_url")
    assert "authorization" in str(error) and "pa55word" not in str(error)


@pytest.mark.parametrize(
    "name",
    [
        "Host",
        "host",
        "Transfer-Encoding",
        "Connection",
        "Content-Length",
        "Upgrade",
        "TE",
        "Mcp-Session-Id",
        "X Bad",
    ],
)
def test_host_hop_by_hop_and_framing_headers_are_refused(name: str) -> None:
    tool = {**TOOL, "headers": {"X-Key": "k", name: "evil.internal"}}
    error = _refused(_session(), [tool])
    assert (error.code, error.param) == ("invalid_value", "session.tools[0].headers")


def test_a_session_names_at_most_16_mcp_servers() -> None:
    tools = [{**TOOL, "server_label": f"kb{i}"} for i in range(17)]
    error = _refused(_session(), tools)
    assert (error.code, error.param) == ("invalid_value", "session.tools[16]")
    effects = drive(_session().receive, wire.session_update({"tools": tools[:16]}), 0.0)
    assert _types(effects).count("mcp_list_tools.in_progress") == 16

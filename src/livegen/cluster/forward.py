"""Relay a resuming socket to the process that owns its session (``cluster/gate.py`` calls it).

A parked voice session cannot move between processes (it holds its model's
stream), so the process that accepted the resume opens a WebSocket to the
owner's private address with the same path, query, key and subprotocols, and
relays frames both ways until either side closes. The owner does the rest as
for any resume: it claims the single-use token (of two relayed resumes, one
wins) and replays the journal. A vllm-omni duplex resume names its session in
its first message, not the URL, so ``server/realtime/voice.py`` relays it once it has
read that message (``forward_accepted``), which goes first. Close codes pass through; a client that
vanished (no close frame) vanishes for the owner too, so the session parks
again, as it would without the relay.

A WebRTC call's hangup is one HTTP request, relayed to the process that holds
the call by ``forward_http`` (plain HTTP/1.1 over asyncio's streams, no
client library); the ``?call_id=`` attach is a socket, relayed as above. So is
a resuming call offer (``POST /v1/realtime/calls?session_id=``): its body (the
multipart offer, already bounded by ``server/http/bodies.py``) and its answer (201,
the SDP answer and its ``Location``, or the owner's refusal) pass unchanged,
and the call's media then flows between the caller and the owner, whose ICE
candidates the answer carries.

An owner that is gone (no address, or no connection to its address within
``CONNECT_TIMEOUT_S``: a process that died refuses at once, a machine that
died never answers) is OpenAI's ``session_not_found`` on the client's socket,
then close 1008, never a hang (a duplex resume: vllm-omni's code for it, from
this process's engine; a call's attach: ``call_not_found``, from this
process's route, as for a call it never heard of). An owner that takes the
connection is alive, if busy (its kernel accepts for it, its event loop
answers): its handshake or answer is waited for up to ``OWNER_ANSWER_TIMEOUT_S``
(a call offer's, longer: ``cluster/gate.py``), and one that has not answered
by then is refused with ``owner_busy`` (a socket: close 1013, try again later;
HTTP: 503), never as an unknown id: the session or call may well be there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
from typing import Any
from urllib.parse import quote

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from livegen.errors import RemoteProtocolError
from livegen.logs import log_event
from livegen.protocol import errors as wire_errors
from livegen.protocol import realtime as wire
from livegen.protocol.realtime import server as ev
from livegen.server.http.auth import offered_subprotocols, select_subprotocol
from livegen.server.http.origins import send_denial
from livegen.tasks import TaskSet

logger = logging.getLogger("livegen.server")

#: How long a connection to the owner may take before the owner is taken for gone.
CONNECT_TIMEOUT_S = 3.0
#: How long an owner that took the connection may take to accept a relayed socket or answer a
#: relayed HTTP request (a hangup) before the client is told to retry (``owner_busy``): a
#: process whose loop is busy for seconds is alive, and its sessions with it. Under the 10 s a
#: WebSocket client commonly waits for its handshake (the relay accepts the client's socket once
#: the owner has accepted its twin), so that the client hears why.
OWNER_ANSWER_TIMEOUT_S = 8.0
#: Headers the owner needs to see as the client sent them.
PASSED_HEADERS = ("authorization", "openai-beta", "origin")
#: And for a relayed HTTP request: its body's type (a multipart offer's boundary).
HTTP_PASSED_HEADERS = (*PASSED_HEADERS, "content-type")
#: Response headers the relay's own server writes (uvicorn's ``date`` and ``server``) or that
#: described the owner's connection, not the answer.
UNPASSED_ANSWER_HEADERS = (b"connection", b"transfer-encoding", b"date", b"server")
#: The mark of a relayed connection, honoured on the owner's private port only (``cluster/gate.py``);
#: its value is the cluster's shared secret, which the gate puts in the scope under ``RELAY_KEY``.
RELAYED_HEADER = b"x-livegen-relayed"
RELAY_KEY = "livegen.relay_key"
#: Close codes that may not be sent in a close frame: the relay aborts instead.
UNSENDABLE = frozenset({1005, 1006, 1015})


class OwnerBusy:
    """The owner took the connection but did not answer in time (``wire_errors.OWNER_BUSY``)."""


async def forward(
    scope: Scope, receive: Receive, send: Send, address: str | None, fallback: ASGIApp | None = None
) -> None:
    """Relay this socket to ``address`` (``ws://host:port``); when no process is there (no
    address, or it cannot be reached) ``fallback`` answers it, as this process would answer an
    id it does not know (by default ``session_not_found``; a call's attach: ``call_not_found``)."""
    upstream = None if address is None else await _open_upstream(scope, address)
    if isinstance(upstream, InvalidStatus):  # the owner refused the handshake itself: pass it on
        response = upstream.response
        await send_denial(scope, receive, send, response.status_code, bytes(response.body or b""))
        return
    if isinstance(upstream, OwnerBusy):
        await _refuse_socket(scope, receive, send, _busy(scope, OWNER_ANSWER_TIMEOUT_S), 1013)
        return
    if upstream is None:
        await (fallback or _not_found)(scope, receive, send)
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
    await _relay(upstream, receive, send)


async def forward_accepted(scope: Scope, receive: Receive, send: Send, address: str, first: str) -> bool:
    """Relay a socket accepted here whose first message, ``first``, was read here (a duplex
    ``session.resume``: its session id is in that message, not the URL) to the owner at
    ``address``, or refuse it (``owner_busy``) when the owner does not answer in time. False,
    with nothing sent to the client, when the owner is gone or refuses it."""
    upstream = await _open_upstream(scope, address)
    if isinstance(upstream, OwnerBusy):
        await send_refusal(send, _busy(scope, OWNER_ANSWER_TIMEOUT_S), 1013)
        return True
    if not isinstance(upstream, ClientConnection):
        return False
    try:
        await upstream.send(first)
    except ConnectionClosed:
        upstream.transport.abort()
        return False
    await _relay(upstream, receive, send)
    return True


async def _open_upstream(scope: Scope, address: str) -> ClientConnection | InvalidStatus | OwnerBusy | None:
    """This socket's twin to the owner: the same path, query, key and subprotocols, marked as
    relayed; the owner's refusal of the handshake; ``OwnerBusy`` when it took the connection but
    not the handshake in time; or None when the owner cannot be reached."""
    headers = [
        (k.decode("latin-1"), v.decode("latin-1"))
        for k, v in scope.get("headers", [])
        if k.decode("latin-1").lower() in PASSED_HEADERS
    ]
    headers.append((RELAYED_HEADER.decode(), str(scope.get(RELAY_KEY, ""))))
    query = scope.get("query_string", b"").decode("latin-1")
    sock = await _connect(address)
    if sock is None:
        return None
    try:
        return await connect(
            f"{address}{scope['path']}?{query}",
            sock=sock,
            additional_headers=headers,
            subprotocols=offered_subprotocols(scope) or None,  # type: ignore[arg-type]
            open_timeout=OWNER_ANSWER_TIMEOUT_S,
            max_size=None,
            compression=None,
            ping_interval=None,
            proxy=None,
            ssl=_private_tls() if address.startswith("wss://") else None,
        )
    except InvalidStatus as refused:
        return refused
    except TimeoutError:
        sock.close()
        log_event(logger, "cluster.owner_busy", logging.WARNING, address=address)
        return OwnerBusy()
    except (OSError, InvalidHandshake) as exc:
        sock.close()
        log_event(logger, "cluster.owner_unreachable", logging.WARNING, address=address, error=repr(exc))
        return None


async def _connect(address: str) -> socket.socket | None:
    """A TCP connection to the process at ``address`` (``ws://host:port``), made within
    ``CONNECT_TIMEOUT_S``; None when none is (that process, or its machine, is gone)."""
    host, port = _host_port(address)
    loop = asyncio.get_running_loop()
    sock: socket.socket | None = None
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            family, kind, proto, _, where = (await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))[0]
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            await loop.sock_connect(sock, where)
            return sock
    except (OSError, TimeoutError) as exc:
        log_event(logger, "cluster.owner_unreachable", logging.WARNING, address=address, error=repr(exc))
    except BaseException:
        if sock is not None:
            sock.close()
        raise
    if sock is not None:
        sock.close()
    return None


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.split("://", 1)[1].rpartition(":")
    return host.strip("[]"), int(port)


async def forward_http(
    scope: Scope,
    receive: Receive,
    send: Send,
    address: str,
    fallback: ASGIApp,
    answer_timeout_s: float = OWNER_ANSWER_TIMEOUT_S,
) -> None:
    """Relay one HTTP request (a call's hangup, a resuming call offer), with its query and body, to
    the process at ``address`` (its ``ws://`` or ``wss://`` private address) and its answer back,
    status, headers and body, if it comes within ``answer_timeout_s`` (else 503 ``owner_busy``);
    ``fallback`` answers it when that process cannot be reached (the call or session is gone with
    it: ``call_not_found``, ``session_not_found``)."""
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False) and message["type"] == "http.request"
    answer = await _request(scope, address, body, answer_timeout_s)
    if isinstance(answer, OwnerBusy):
        refusal = json.dumps({"error": _busy(scope, answer_timeout_s).to_error_body()}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(refusal)).encode())]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": refusal})
        return
    if answer is None:
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await fallback(scope, replay, send)
        return
    status, headers, content = answer
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


async def _request(
    scope: Scope, address: str, body: bytes, answer_timeout_s: float
) -> tuple[int, list[Any], bytes] | OwnerBusy | None:
    """One HTTP/1.1 exchange with another process of this server (``Connection: close``);
    ``OwnerBusy`` when it took the connection but did not answer in ``answer_timeout_s``; None
    when it cannot be reached or answers nothing readable."""
    sock = await _connect(address)
    if sock is None:
        return None
    tls = _private_tls() if address.startswith("wss://") else None
    writer: asyncio.StreamWriter | None = None
    try:
        # TLS and the answer: the owner's loop does both (an offer's answer gathers ICE candidates).
        async with asyncio.timeout(answer_timeout_s):
            reader, writer = await asyncio.open_connection(
                sock=sock, ssl=tls, server_hostname=_host_port(address)[0] if tls else None
            )
            writer.write(_request_head(scope, address, body) + body)
            raw = await reader.read()
    except TimeoutError:
        log_event(logger, "cluster.owner_busy", logging.WARNING, address=address)
        return OwnerBusy()
    except OSError as exc:
        log_event(logger, "cluster.owner_unreachable", logging.WARNING, address=address, error=repr(exc))
        return None
    finally:
        if writer is not None:
            writer.close()
        else:
            sock.close()
    head, _, content = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.split(b"\r\n")
    try:
        status = int(status_line.split()[1])
    except (IndexError, ValueError):
        return None
    headers = [tuple(line.split(b": ", 1)) for line in header_lines if b": " in line]
    kept = [(k.lower(), v) for k, v in headers if k.lower() not in UNPASSED_ANSWER_HEADERS]
    return status, kept, content


def _request_head(scope: Scope, address: str, body: bytes) -> bytes:
    """The relayed request's line and headers: as the client sent them, marked as relayed."""
    passed = [
        (k, v) for k, v in scope.get("headers", []) if k.decode("latin-1").lower() in HTTP_PASSED_HEADERS
    ]
    target = quote(scope["path"]).encode()  # as sent: a decoded CR or LF may not reach the request line
    if query := scope.get("query_string", b""):  # raw, as it came in a request line
        target += b"?" + query
    where = address.split("://", 1)[1]
    lines = [f"{scope['method']} ".encode() + target + b" HTTP/1.1", f"host: {where}".encode()]
    lines += [k + b": " + v for k, v in passed]
    mark = str(scope.get(RELAY_KEY, "")).encode()
    lines += [RELAYED_HEADER + b": " + mark, f"content-length: {len(body)}".encode(), b"connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _busy(scope: Scope, seconds: float) -> RemoteProtocolError:
    """``owner_busy``, naming what the request was for: a call (its hangup or attach) or a session."""
    path = scope.get("path", "")
    is_call = path.endswith("/hangup") or b"call_id=" in scope.get("query_string", b"")
    return wire_errors.OWNER_BUSY.error(what="call" if is_call else "session", seconds=seconds)


def _private_tls() -> ssl.SSLContext:
    """TLS to another process of this server, at its private address: encrypted, and not checked
    against a name (the address is an IP that its certificate does not name)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def _relay(upstream: ClientConnection, receive: Receive, send: Send) -> None:
    inbound = TaskSet()  # the client's half: ended with the owner's, however that ends
    inbound.spawn(_client_to_owner(upstream, receive))
    try:
        await _owner_to_client(upstream, send)
    finally:
        await inbound.aclose()
        upstream.transport.abort()


async def _client_to_owner(upstream: ClientConnection, receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            code = int(message.get("code", 1006))
            if code in UNSENDABLE:
                upstream.transport.abort()  # the owner sees the client vanish: the session parks
            else:
                with contextlib.suppress(Exception):
                    await upstream.close(code)
            return
        data: Any = message.get("text")
        if data is None:
            data = message.get("bytes") or b""
        try:
            await upstream.send(data)
        except ConnectionClosed:
            return


async def _owner_to_client(upstream: ClientConnection, send: Send) -> None:
    try:
        async for data in upstream:
            key = "text" if isinstance(data, str) else "bytes"
            await send({"type": "websocket.send", key: data})
    except ConnectionClosed:
        pass
    code = upstream.close_code
    # An owner that vanished (its process died) is a server error for the client: 1011.
    close_code = 1011 if code is None or code in UNSENDABLE else code
    with contextlib.suppress(Exception):
        await send({"type": "websocket.close", "code": close_code, "reason": upstream.close_reason or ""})


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    error = wire_errors.SESSION_NOT_FOUND.error(detail="no live session with that id")
    await _refuse_socket(scope, receive, send, error, 1008)


async def _refuse_socket(
    scope: Scope, receive: Receive, send: Send, error: RemoteProtocolError, code: int
) -> None:
    """Accept the socket and refuse it with ``error``, then close ``code``."""
    await receive()  # websocket.connect
    await send({"type": "websocket.accept", "subprotocol": select_subprotocol(scope)})
    # As the owner would: the refusal answers the client's session.resume (read, not checked).
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            if (await receive())["type"] == "websocket.disconnect":
                return
    await send_refusal(send, error, code)


async def send_refusal(send: Send, error: RemoteProtocolError, code: int) -> None:
    """On an accepted socket of the raw ASGI layer: OpenAI's error event, as the engine's refusals
    send it (``event_refused``), then the close."""
    refused = ev.Error(event_id="event_refused", error=error.to_error_body())
    await send({"type": "websocket.send", "text": wire.encode(refused).decode()})
    await send({"type": "websocket.close", "code": code})

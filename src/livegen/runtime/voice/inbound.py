"""A live session's inbound half: its link's client messages, decoded, to its runner.

While a session is live its owner runs ``read`` on the attached link: each text
message goes to the runner in the session's dialect (GA and beta decode as
Realtime events; the duplex dialect, ``protocol/realtime/duplex.py``, turns its own
messages into them and takes its ``session.event_ack`` for the journal), a
message the transport could not decode goes to the runner as its error (the
client gets it, the session goes on), and the link's close code ends the read.
"""

from __future__ import annotations

from typing import Any

from livegen.errors import RemoteProtocolError
from livegen.protocol import errors as wire_errors
from livegen.protocol import realtime as wire
from livegen.protocol.realtime import duplex
from livegen.runtime.voice.lifecycle import Link, LiveSession


async def read(link: Link, live: LiveSession, events_in: Any) -> int | Exception:
    """Pass the link's client events to the runner until it closes; returns its close code, or
    the exception that stopped the read, for the owner to raise in its own task (raised here, in
    a task of the owner's task group, it would cancel the runner before its terminal event).
    ``events_in`` counts the events (a Prometheus counter child)."""
    try:
        while True:
            message = await link.receive()
            if isinstance(message, int):
                return message
            events_in.inc()
            if type(message) is str and live.duplex is None:  # a Realtime text event: no deliver frame
                try:
                    event: wire.ClientEvent | RemoteProtocolError = wire.decode(message)
                except RemoteProtocolError as error:
                    event = error
                await live.runner.put_client(event)
            elif isinstance(message, RemoteProtocolError | wire.ClientEvent):
                await live.runner.put_client(message)
            else:
                await deliver(message, live)
    except Exception as exc:
        return exc


async def deliver(text: str, live: LiveSession) -> None:
    """One client text message to the runner, through the session's dialect."""
    runner = live.runner
    try:
        if live.duplex is None:
            await runner.put_client(wire.decode(text))
            return
        inbound = live.duplex.inbound(text)
    except RemoteProtocolError as error:
        await runner.put_client(error)
        return
    if isinstance(inbound, duplex.EventAck):
        try:
            live.attachment.acknowledge(inbound.seq)
        except ValueError as exc:
            refusal = wire_errors.INVALID_EVENT_ACK.error(detail=str(exc), event_id=inbound.event_id)
            await runner.put_client(refusal)
    elif isinstance(inbound, list):
        for event in inbound:
            await runner.put_client(event)

"""Resume handoff: a resuming link claims a session, and the session's owner takes it over.

Only the task that owns a session attaches and detaches its links, so there is
no race between a resume and the session ending. A resuming link only claims
the session's single-use token and posts a ``Handoff`` to the owner
(``hand_over``), then waits until the owner is done with it. The owner takes it
over (``take_over``): the greeting (``session.resumed``, or the duplex
dialect's), the journal's replay after the client's last ``seq``, then live. A
replay the journal cannot give, or a session in audio formats the new link
cannot carry (a WebRTC call's track), is an error on the new link, and the
session stays resumable with its old token. A transport that must answer
before the take-over (a call's HTTP answer) claims and posts in one step
(``post``) and does not wait.

The links the session no longer uses are closed here too (``retire``,
``retire_later``), and resumes that arrive as the session ends are turned away
(``turn_away``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from livegen.errors import RemoteProtocolError
from livegen.logs import bind_session, log_event
from livegen.protocol import errors as wire_errors
from livegen.protocol import realtime as wire
from livegen.protocol.realtime import duplex
from livegen.runtime.voice.attachment import JournalGap, new_token
from livegen.runtime.voice.lifecycle import Handoff, Link, LiveSession, resumed_event

logger = logging.getLogger("livegen.runtime.voice")

#: Close code for a link whose session was resumed on another connection.
REPLACED = 4001
#: How long a replaced link may take to close (its peer may not be reading) before we let go.
RETIRE_TIMEOUT_S = 5.0

SendError = Callable[[Link, RemoteProtocolError], Awaitable[None]]


async def hand_over(
    live: LiveSession | None, handoff: Handoff, session_id: str, resume_token: str, send_error: SendError
) -> None:
    """A resuming link for ``live`` (None: no such session): claim its token (single use: a second
    resume with it is refused), post the handoff to the session's owner, and return when the
    owner is done with the link."""
    try:
        post(live, handoff, resume_token)
    except RemoteProtocolError as error:
        await send_error(handoff.link, error)
        await handoff.link.close(1008)
        return
    with bind_session(session_id):
        await handoff.released.wait()


def post(live: LiveSession | None, handoff: Handoff, resume_token: str) -> None:
    """Claim ``live``'s token and post ``handoff`` to its owner, in one synchronous step (so the
    session cannot end between the two unseen: ``turn_away`` answers what was posted). Raises
    ``session_not_found`` (None: no such session) or ``invalid_resume_token``, nothing claimed."""
    if live is None or not live.credential.claim(resume_token):
        raise refusal(live, handoff.duplex)
    live.handoffs.put_nowait(handoff)


def refusal(live: LiveSession | None, is_duplex: bool = False) -> RemoteProtocolError:
    """Why a resume of ``live`` (None: no such session) with a token is refused."""
    error = wire_errors.SESSION_NOT_FOUND if live is None else wire_errors.INVALID_RESUME_TOKEN
    error = duplex.RESUME_ERRORS[error.code] if is_duplex else error
    return error.error(detail="no live session with that id")


async def take_over(live: LiveSession, handoff: Handoff, send_error: SendError) -> bool:
    """Attach the resuming link: greeting, replay, live. A refused replay (a gap in the journal,
    a seq never sent) is an error on the new link; the session stays parked."""
    live.attachment.detach()
    session_id = live.runner.session.id
    try:  # a call's track carries one format: a session in another cannot go on it
        live.runner.session.fix_formats(handoff.formats_fixed)
    except ValueError as exc:
        live.credential.give_back()
        refusal = wire_errors.INVALID_RESUME.error(detail=exc, event_id=handoff.event_id)
        with contextlib.suppress(Exception):
            await send_error(handoff.link, refusal)
        return False
    token = new_token()
    if handoff.duplex:
        session = live.runner.session.config.to_object(session_id)
        resumed = duplex.Resumed(session_id=session_id, session=session, resume_token=token)
        greeting = wire.encode(resumed).decode()
    else:
        greeting = resumed_event(session_id, token, handoff.last_seq, live.attachment.seq)
    try:
        replayed = await live.attachment.attach(handoff.link.send_text, handoff.last_seq, greeting)
    except (JournalGap, ValueError) as exc:
        live.credential.give_back()
        with contextlib.suppress(Exception):
            await _refuse_replay(handoff, exc, session_id, send_error)
        return False
    except Exception:  # the new link died during the replay: parked again, events kept
        live.attachment.detach()
        live.credential.give_back()
        return False
    live.credential.settle(token)
    log_event(logger, "voice.session_resumed", last_seq=handoff.last_seq, replayed=replayed)
    return True


async def _refuse_replay(handoff: Handoff, exc: Exception, session_id: str, send_error: SendError) -> None:
    if handoff.duplex and isinstance(exc, JournalGap):
        await handoff.link.send_text(wire.encode(duplex.ResyncRequired(session_id=session_id)).decode())
        return
    if handoff.duplex:  # a seq never sent: the gap went to resync_required above
        error = wire_errors.SESSION_RESUME_CONFLICT.error(detail=exc, event_id=handoff.event_id)
    else:
        kind = wire_errors.RESUME_GAP if isinstance(exc, JournalGap) else wire_errors.INVALID_VALUE
        error = kind.error(detail=exc, param="last_event_seq", event_id=handoff.event_id)
    await send_error(handoff.link, error)


async def retire(handoff: Handoff | None, code: int) -> None:
    """Close a link the session no longer uses, and let its handler return."""
    if handoff is None:
        return
    with contextlib.suppress(Exception):
        await handoff.link.close(code)
    handoff.released.set()


async def retire_later(handoff: Handoff, code: int) -> None:
    """Close a replaced link, bounded (its peer may never read); run it beside the resume."""
    try:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(RETIRE_TIMEOUT_S):
                await handoff.link.close(code)
    finally:
        handoff.released.set()


async def turn_away(live: LiveSession, send_error: SendError) -> None:
    """Resumes that arrived as the session ended: tell them, and let their handlers return."""
    while not live.handoffs.empty():
        handoff = live.handoffs.get_nowait()
        ended = wire_errors.SESSION_NOT_FOUND.error(detail="the session has ended")
        await send_error(handoff.link, ended)
        await handoff.link.close(1008)
        handoff.released.set()

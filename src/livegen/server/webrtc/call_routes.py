"""What both call routes (``/v1/realtime/calls``, ``/v1/worlds/calls``) share, in one place.

A call is an SDP offer posted over HTTP by a page, maybe on another origin, and
answered with ``201``, the SDP answer and ``Location: {path}/{call_id}``; it is
hung up at ``{path}/{call_id}/hangup``. The voice transport
(``server/webrtc/peer.py``) and the world transport (``server/webrtc/world_calls.py``)
differ in their media and sessions only; the rest is here:

- ``CallRoutes``: a route's live calls by id and those being answered (both
  counted against ``--webrtc-max-calls``), hangup, who may touch a call (the
  server's key or the call's own ephemeral key), refusals in OpenAI's shape,
  and shutdown;
- ``tasks``: ``livegen/tasks.py``'s ``TaskSet``, made with this module's
  logger (a call's writer, listener and watchdog; a route's calls): each is
  cancelled and awaited when its owner ends, a failure is logged;
- offers: ``read_offer`` (``application/sdp``, or multipart with an ``sdp``
  part, an optional ``session`` and, for a voice call that resumes a session,
  ``resume``), read under the body limits of ``server/http/bodies.py``, and
  ``check_offer``, which refuses in words a caller can act on what aiortc could
  not (or should not) take;
- ``cors``: pages on other origins may call and read the answer.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from livegen.errors import RemoteProtocolError
from livegen.logs import log_event
from livegen.protocol import errors as wire_errors
from livegen.protocol.errors import WireError
from livegen.server.http.auth import EPHEMERAL_PREFIX, presented_key
from livegen.server.http.bodies import json_object, multipart_fields
from livegen.server.http.client_secrets import error_response
from livegen.tasks import TaskSet

if TYPE_CHECKING:
    from aiortc import RTCPeerConnection

    from livegen.server.state import State

logger = logging.getLogger("livegen.server.call_routes")

#: Media sections an offer may have (a browser's has two or three: its tracks and the data channel);
#: each costs aiortc a transceiver, so thousands of them cost memory and stall the server.
MAX_MEDIA_SECTIONS = 8
#: Seconds a stopping server gives its calls to end on their own before they are cancelled.
STOP_GRACE_S = 5.0
#: Lines every negotiable offer has (RFC 8839, 8842), and what the caller is told when one is missing.
NEGOTIABLE_LINES = (
    ("a=ice-ufrag:", "ICE credentials (a=ice-ufrag and a=ice-pwd)"),
    ("a=ice-pwd:", "ICE credentials (a=ice-ufrag and a=ice-pwd)"),
    ("a=fingerprint:", "DTLS fingerprint (a=fingerprint)"),
    ("a=setup:", "DTLS setup role (a=setup)"),
)

INVALID_OFFER = WireError(
    "invalid_offer", "{detail}", "livegen", "a malformed SDP offer, or one without the call's media"
)
CALL_NOT_FOUND = WireError(
    "call_not_found",
    "no live call with id {call_id!r}",
    "livegen",
    "an unknown call, or one opened with another ephemeral key",
)
TOO_MANY_CALLS = WireError(
    "too_many_sessions", "the server holds {limit} WebRTC calls", "livegen", "over `--webrtc-max-calls`"
)
#: HTTP status for each refusal code at call setup (any other: 400).
STATUS = {
    "model_not_ready": 503,
    "not_ready": 503,
    "too_many_sessions": 429,
    "realtime_capacity": 429,
    "model_error": 500,
    "call_not_found": 404,
    "session_not_found": 404,
}


class LiveCall(Protocol):
    """What ``CallRoutes`` needs of a call of either kind."""

    @property
    def id(self) -> str: ...

    @property
    def key(self) -> str | None: ...

    def end(self, reason: str) -> None: ...


C = TypeVar("C", bound=LiveCall)


def may_touch(call: LiveCall, key: str | None) -> bool:
    """Hangup and attach: the server's key (or none, on a server without one) or the call's own."""
    if key is None or not key.startswith(EPHEMERAL_PREFIX):
        return True  # the API-key middleware has already checked it is the server's
    return call.key is not None and hmac.compare_digest(key.encode(), call.key.encode())


class CallRoutes(Generic[C]):
    """One call route: its calls, hangup, refusals and shutdown. A subclass answers offers
    (``create``), serves each call it answers as a task of ``tasks``, and names its route."""

    #: Where offers are posted (``/v1/realtime/calls``).
    path: ClassVar[str] = ""
    #: The kind of session (the ``kind`` label of the error metrics).
    kind: ClassVar[str] = ""
    #: The log line of a refused offer.
    refused_event: ClassVar[str] = ""

    def __init__(self, state: State) -> None:
        self.state = state
        self.calls: dict[str, C] = {}
        #: Calls being set up (between the offer and the answer), counted against the limit too.
        self.num_answering = 0
        #: Each call's serving task, from its answer to its end.
        self.tasks = TaskSet(logger)

    def routes(self) -> list[BaseRoute]:
        return [
            Route(self.path, cors(self.create), methods=["POST", "OPTIONS"]),
            Route(f"{self.path}/{{call_id}}/hangup", cors(self.hangup), methods=["POST", "OPTIONS"]),
        ]

    async def create(self, request: Request) -> Response:
        raise NotImplementedError

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """A call being answered, counted against the limit until it is a call or refused."""
        self.num_answering += 1
        try:
            yield
        finally:
            self.num_answering -= 1

    def check_room(self) -> None:
        """Refuse a call over ``--webrtc-max-calls`` (this one is counted as answering)."""
        limit = self.state.config.webrtc_max_calls
        if len(self.calls) + self.num_answering > limit:
            raise TOO_MANY_CALLS.error(limit=limit)

    async def stop(self) -> None:
        for call in list(self.calls.values()):
            call.end("server_shutdown")
        await self.tasks.close(STOP_GRACE_S)

    def live_call(self, call_id: str, key: str | None) -> C | None:
        """The live call ``call_id`` if ``key`` may touch it; a call opened with another
        ephemeral key is, for this key, no call at all."""
        call = self.calls.get(call_id)
        return call if call is not None and may_touch(call, key) else None

    async def hangup(self, request: Request) -> Response:
        call_id = request.path_params["call_id"]
        call = self.live_call(call_id, presented_key(request.scope))
        if call is None:
            return error_response(CALL_NOT_FOUND.error(call_id=call_id, param="call_id"), 404)
        call.end("hangup")
        return Response(status_code=200)

    def peer_connection(self) -> RTCPeerConnection:
        """A call's peer connection, gathering with the server's ``--webrtc-ice-servers``."""
        from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection

        servers = [RTCIceServer(urls=url) for url in self.state.config.webrtc_ice_servers]
        return RTCPeerConnection(RTCConfiguration(iceServers=servers))

    def refuse(self, error: RemoteProtocolError) -> Response:
        """An offer refused: counted, logged (by code) and answered in OpenAI's shape."""
        self.state.metrics.errors.labels(kind=self.kind, code=error.code).inc()
        log_event(
            logging.getLogger(type(self).__module__), self.refused_event, logging.WARNING, code=error.code
        )
        return error_response(error, STATUS.get(error.code, 400))


def follow_peer(pc: Any, end: Callable[[str], None]) -> None:
    """End the call when its connection fails or closes (``peer_failed``, ``peer_closed``)."""

    @pc.on("connectionstatechange")  # type: ignore[untyped-decorator]
    def on_state() -> None:
        if pc.connectionState in ("failed", "closed"):
            end(f"peer_{pc.connectionState}")


def when_open(channel: Any, open_channel: Callable[[Any], None]) -> None:
    """Hand the call its data channel once it is open (now, if it is already)."""
    if channel.readyState == "open":
        open_channel(channel)
    else:
        channel.on("open", lambda: open_channel(channel))


@dataclass(frozen=True)
class Offer:
    """A call request's parts: the SDP offer, and what a multipart request added to it."""

    sdp: str
    #: The ``session`` part (JSON, applied like a key's configuration); None when absent.
    session: dict[str, Any] | None = None
    #: The ``resume`` part: a ``session.resume`` event's text (``server/realtime/resume.py`` checks it).
    resume: str | None = None


async def read_offer(request: Request) -> Offer:
    """The offer of a call request (``application/sdp`` or multipart), read and parsed under the
    limits of ``server/http/bodies.py``."""
    content_type = request.headers.get("content-type", "")
    body = await request.body()
    if not content_type.startswith("multipart/form-data"):
        return Offer(body.decode("utf-8", "replace"))
    fields = multipart_fields(body, content_type)
    if "sdp" not in fields:
        raise wire_errors.MISSING_REQUIRED_PARAMETER.error(name="sdp", param="sdp")
    session = json_object(fields["session"], "session") if "session" in fields else None
    resume = fields["resume"].decode("utf-8", "replace") if "resume" in fields else None
    return Offer(fields["sdp"].decode("utf-8", "replace"), session, resume)


def check_offer(sdp: str, required: tuple[tuple[str, str], ...]) -> None:
    """Refuse an offer that is not SDP, has too many media sections, or lacks one of ``required``'s
    lines (the route's media, then ``NEGOTIABLE_LINES``), in words the caller can act on."""
    if not sdp.lstrip().startswith("v=0"):
        raise INVALID_OFFER.error(
            detail="the body is not an SDP offer (it must start with 'v=0')", param="sdp"
        )
    text = "\n" + sdp.replace("\r\n", "\n")
    sections = text.count("\nm=")
    if sections > MAX_MEDIA_SECTIONS:
        detail = f"the SDP offer has {sections} media sections; a call takes at most {MAX_MEDIA_SECTIONS}"
        raise INVALID_OFFER.error(detail=detail, param="sdp")
    for line, what in required:
        if "\n" + line not in text:
            raise INVALID_OFFER.error(detail=f"the SDP offer has no {what}", param="sdp")


def cors(handler: Any) -> Any:
    """Let pages on other origins call (the origin check upstream already allowed this one):
    answer the preflight, and let them read the answer, its errors and its ``Location``."""

    async def endpoint(request: Request) -> Response:
        origin = request.headers.get("origin")
        if request.method == "OPTIONS":
            response: Response = Response(status_code=204)
            response.headers["Access-Control-Allow-Methods"] = "POST"
            response.headers["Access-Control-Allow-Headers"] = "authorization, content-type"
            response.headers["Access-Control-Max-Age"] = "600"
        else:
            response = await handler(request)
        if origin is not None:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = "Location"
            response.headers["Vary"] = "Origin"
        return response

    return endpoint

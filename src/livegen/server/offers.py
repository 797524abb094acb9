"""What both call routes (``/v1/realtime/calls``, ``/v1/worlds/calls``) read and answer alike.

A call is an SDP offer posted over HTTP by a page, maybe on another origin:
``cors`` lets such pages call and read the answer, ``read_offer`` reads the
offer (``application/sdp``, or multipart with an ``sdp`` part, an optional
``session`` and, for a voice call that resumes a session, ``resume``) under
the body limits of ``server/bodies.py``. One place, so that the voice and world
transports read a caller alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from livegen.protocol import errors as wire_errors
from livegen.server.bodies import json_object, multipart_fields


@dataclass(frozen=True)
class Offer:
    """A call request's parts: the SDP offer, and what a multipart request added to it."""

    sdp: str
    #: The ``session`` part (JSON, applied like a key's configuration); None when absent.
    session: dict[str, Any] | None = None
    #: The ``resume`` part: a ``session.resume`` event's text (``server/resume.py`` checks it).
    resume: str | None = None


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


async def read_offer(request: Request) -> Offer:
    """The offer of a call request (``application/sdp`` or multipart), read and parsed under the
    limits of ``server/bodies.py``."""
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

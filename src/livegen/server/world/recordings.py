"""``GET /v1/worlds/recordings/{id}`` (the video) and ``/v1/worlds/recordings/{id}/events`` (the log).

The recordings themselves are the world engine's (``runtime/world/recording.py``:
where they are, which exist, retention); this module only serves their files,
behind the same API key as every other route (``server/http/auth.py``). A recording
being written is served as far as it is written (the MP4 is fragmented, the
log is flushed per line). An id that is not a recording here is a 404
``recording_not_found``, the same whether it never existed, was deleted by
retention, or is not well formed; with recordings off it is a 404 saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from livegen.runtime.world.recording import RecordingSettings

if TYPE_CHECKING:
    from livegen.runtime.world.engine import WorldEngine
    from livegen.server.config import ServerConfig


def recording_settings(config: ServerConfig) -> RecordingSettings | None:
    """``--world-recordings`` and its retention, or None when recordings are off."""
    if config.world_recordings is None:
        return None
    return RecordingSettings(
        directory=config.world_recordings,
        max_count=config.world_recordings_max_count,
        max_bytes=config.world_recordings_max_bytes,
    )


def recording_routes(engine: WorldEngine) -> list[BaseRoute]:
    async def video(request: Request) -> Response:
        recordings, recording_id = engine.recordings, request.path_params["recording_id"]
        path = None if recordings is None else recordings.video_path(recording_id)
        if recordings is None or path is None:
            return _not_found(recording_id, is_on=recordings is not None)
        return FileResponse(
            path, media_type=recordings.format.content_type, filename=f"{recording_id}{path.suffix}"
        )

    async def events(request: Request) -> Response:
        recordings, recording_id = engine.recordings, request.path_params["recording_id"]
        path = None if recordings is None else recordings.events_path(recording_id)
        if recordings is None or path is None:
            return _not_found(recording_id, is_on=recordings is not None)
        return _events_response(path)

    return [
        Route("/v1/worlds/recordings/{recording_id}", video, methods=["GET", "HEAD"]),
        Route("/v1/worlds/recordings/{recording_id}/events", events, methods=["GET", "HEAD"]),
    ]


def _events_response(path: Path) -> Response:
    return FileResponse(path, media_type="application/x-ndjson")


def _not_found(recording_id: str, *, is_on: bool) -> Response:
    message = (
        f"no recording {recording_id!r} on this server (never made, or deleted by retention)"
        if is_on
        else "recordings are off on this server: it was started without --world-recordings DIR"
    )
    body = {
        "error": {
            "type": "invalid_request_error",
            "code": "recording_not_found",
            "message": message,
            "param": "recording_id",
        }
    }
    return JSONResponse(body, status_code=404)

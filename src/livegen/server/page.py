"""The browser page: ``GET /`` and its plain ES modules under ``/static/``.

A person's first look at livegen is this page, so it is served by the same
app as the endpoints it talks to, with no build step: the files in
``server/static/`` ship as package data and are sent as they are. The page
owns no session state on the server; it is one more client of
``/v1/realtime`` and ``/v1/worlds``, and asks for the API key itself when
``/v1/models`` answers 401 (the auth middleware leaves the page's own files
open, see ``auth.OPEN_PATHS``).
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC_DIR = Path(__file__).with_name("static")
#: Revalidate on every load, so a page opened after an upgrade never runs stale modules.
NO_CACHE = {"cache-control": "no-cache"}


class _StaticFiles(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(NO_CACHE)
        return response


async def _index(request: Request) -> Response:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=NO_CACHE)


def routes() -> list[BaseRoute]:
    return [
        Route("/", _index, methods=["GET"]),
        Mount("/static", app=_StaticFiles(directory=STATIC_DIR), name="static"),
    ]

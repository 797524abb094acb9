"""What the remote speech stages share: their HTTP client and their health.

A server started with ``--tts-base-url`` or ``--asr-base-url`` speaks or hears
through another server's OpenAI-compatible ``/v1/audio/`` endpoints
(``remote_tts``, ``remote_asr``). Each stage keeps one ``Stage``: its client,
made on first use on the server's event loop (an httpx pool belongs to one
loop), and what ``/health`` says of it, the last failure until a request
succeeds again (``/health`` is 503 for ``FAILING_S`` after it), so an operator
sees which stage is failing and why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

#: Seconds ``/health`` reports a stage failing after its last failed request (unless one succeeds).
FAILING_S = 30.0
#: Most bytes of one answer a stage reads (an error text, a transcript): more is garbage.
MAX_TEXT_BYTES = 1024 * 1024


@dataclass
class Stage:
    """One remote stage: ``name`` ("tts", "asr"), its endpoint, key and deadline."""

    name: str
    base_url: str
    api_key: str | None
    timeout_s: float
    failures: int = 0
    #: The last failure, for a person; "" once a request succeeds again.
    error: str = ""
    failed_at: float = 0.0
    _http: httpx.AsyncClient | None = field(default=None, repr=False)

    def url(self, path: str) -> str:
        return f"{self.base_url.rstrip('/')}/{path}"

    def client(self) -> httpx.AsyncClient:
        """The stage's connection pool, made on first use (on the event loop that uses it)."""
        import httpx

        if self._http is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._http = httpx.AsyncClient(
                base_url=self.base_url.rstrip("/") + "/",
                headers=headers,
                timeout=httpx.Timeout(self.timeout_s, connect=min(5.0, self.timeout_s)),
            )
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def succeeded(self) -> None:
        self.error = ""

    def failed(self, reason: str) -> None:
        self.failures += 1
        self.error = reason[:500]
        self.failed_at = time.time()

    @property
    def is_failing(self) -> bool:
        """Whether its last request failed, within ``FAILING_S``: past it the server is ready
        again, so a balancer that took it out of rotation sends sessions that try the stage anew."""
        return bool(self.error) and time.time() - self.failed_at < FAILING_S

    def report(self) -> dict[str, Any]:
        report: dict[str, Any] = {"url": self.base_url, "ok": not self.is_failing, "failures": self.failures}
        if self.error:
            report.update(error=self.error, failed_at=self.failed_at)
        return report


async def error_text(response: httpx.Response) -> str:
    """The start of an error answer's body, for the message."""
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > 300:
            break
    return body[:300].decode(errors="replace")

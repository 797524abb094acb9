"""Structured logs: one line per event, with the session id on every line of a session.

Lines are logfmt (``key=value``), greppable and readable. The session id comes
from a context variable that the session's task sets once (``bind_session``),
so code deep in a session never has to pass it along to log it.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

session_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "livegen_session_id", default=None
)


@contextmanager
def bind_session(session_id: str) -> Iterator[None]:
    """Tag every log line written inside this block (and tasks it starts) with the session id."""
    token = session_id_var.set(session_id)
    try:
        yield
    finally:
        session_id_var.reset(token)


def _quote(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [
            f"ts={stamp}.{int(record.msecs):03d}Z",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
        ]
        session_id = getattr(record, "session_id", None) or session_id_var.get()
        if session_id:
            parts.append(f"session={session_id}")
        parts.append(f"event={_quote(record.getMessage())}")
        fields: dict[str, Any] = getattr(record, "fields", {})
        parts.extend(f"{key}={_quote(value)}" for key, value in fields.items())
        if record.exc_info:
            parts.append(f"exc={_quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


def log_event(logger: logging.Logger, event: str, level: int = logging.INFO, **fields: Any) -> None:
    """Write one structured line: ``event=<event> key=value ...``."""
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={"fields": fields})


#: Lines uvicorn and websockets log at error level (some with a traceback) for what is a client's
#: fault or our ordinary refusal, and the level each becomes: a text frame that is not UTF-8, an
#: opening handshake that fails, a WebSocket refused with an HTTP answer (401, 403) before accept.
_CLIENT_FAULTS = {
    "Invalid UTF-8 sequence received from client.": logging.WARNING,
    "opening handshake failed": logging.WARNING,
    "ASGI callable returned without completing handshake.": logging.INFO,
}


class ClientFaultFilter(logging.Filter):
    """Turns a client's fault, logged by the WebSocket stack, into one line without a traceback
    (warning, or info for a refusal), so that a client cannot flood the log with tracebacks."""

    def filter(self, record: logging.LogRecord) -> bool:
        level = _CLIENT_FAULTS.get(record.getMessage()) if record.levelno >= logging.ERROR else None
        if level is not None:
            if record.exc_info and record.exc_info[1] is not None:
                error = record.exc_info[1]
                record.msg = f"{record.getMessage()} ({type(error).__name__}: {error})"
                record.args = None
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = level, logging.getLevelName(level)
        return True


def quiet_client_faults() -> None:
    """Install ``ClientFaultFilter`` on the WebSocket stack's logger (idempotent)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, ClientFaultFilter) for f in logger.filters):
        logger.addFilter(ClientFaultFilter())


def configure(level: str = "info") -> None:
    """Send livegen's and uvicorn's logs to stderr as logfmt lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    for name in ("livegen", "uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
    quiet_client_faults()

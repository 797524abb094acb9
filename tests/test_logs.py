"""Log lines a client can cause are one line each, without a traceback."""

from __future__ import annotations

import logging

from livegen.logs import ClientFaultFilter, LogfmtFormatter


def _record(message: str) -> logging.LogRecord:
    try:
        b"\xff".decode()
    except UnicodeDecodeError:
        import sys

        exc_info = sys.exc_info()
    return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, message, None, exc_info)


def test_a_clients_invalid_utf8_is_one_warning_line_without_traceback() -> None:
    record = _record("Invalid UTF-8 sequence received from client.")
    assert ClientFaultFilter().filter(record)
    line = LogfmtFormatter().format(record)
    assert record.levelno == logging.WARNING and "\n" not in line and "Traceback" not in line
    assert "UnicodeDecodeError" in line


def test_our_own_errors_keep_their_traceback() -> None:
    record = _record("Exception in ASGI application\n")
    ClientFaultFilter().filter(record)
    assert record.levelno == logging.ERROR and record.exc_info is not None

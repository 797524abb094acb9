"""``livegen serve``'s options of the server's edge, apart from ``serve.py``'s others.

The HTTP and WebSocket edge (hosts, connections, request heads and bodies, the
key mints), OpenAI's audio API, TLS and WebRTC calls: what bounds a client
before any session exists, each a ``ServerConfig`` field of the same name that
the server's app reads (``server/``). ``serve_help.py``'s ``http``, ``audio``,
``tls`` and ``webrtc`` groups show them under ``--help GROUP``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def edge_options(default: Callable[[str], Any]) -> Callable[[F], F]:
    """The options, each with ``default(name)``: ``ServerConfig``'s, stated there once."""
    options = [*_connections(default), *_requests(default), *_audio_api(default), *_tls_and_calls(default)]

    def apply(command: F) -> F:
        for option in reversed(options):  # as decorators stack: the first listed shows first
            command = option(command)
        return command

    return apply


def _connections(default: Callable[[str], Any]) -> list[Callable[[F], F]]:
    """Which hosts, how many connections, and how long a quiet one is kept."""
    return [
        click.option(
            "--allowed-hosts",
            default=None,
            help="Comma list of Host names allowed (DNS-rebinding guard), or '*'. "
            "[default: the bound host, localhost and any IP address]",
        ),
        click.option(
            "--max-connections",
            default=default("max_connections"),
            show_default=True,
            type=click.IntRange(1),
            help="Open WebSocket connections, all routes; apart from them, open HTTP connections (slow or "
            "silent ones too). One more WebSocket is refused with HTTP 503; one more HTTP connection closes "
            "the one waiting longest for a request head, or gets 503 if every one is mid-request.",
        ),
        click.option(
            "--max-unsent-bytes",
            default=default("max_unsent_bytes"),
            show_default=True,
            type=click.IntRange(1024),
            help="Bytes queued for one socket but not yet written; past it the socket closes with 4002.",
        ),
        click.option(
            "--first-message-timeout",
            "first_message_timeout_s",
            default=default("first_message_timeout_s"),
            show_default=True,
            type=click.FloatRange(0),
            help="Seconds a WebSocket may stay silent after connecting; then it closes with 4003 (0: no "
            "limit).",
        ),
        click.option(
            "--keep-alive-timeout",
            "keep_alive_timeout_s",
            default=default("keep_alive_timeout_s"),
            show_default=True,
            type=click.IntRange(1),
            help="Seconds an idle HTTP keep-alive connection is kept open.",
        ),
    ]


def _requests(default: Callable[[str], Any]) -> list[Callable[[F], F]]:
    """How large and how slow a request head and body may be; what live keys may hold."""
    return [
        click.option(
            "--max-header-bytes",
            default=default("max_header_bytes"),
            show_default=True,
            type=click.IntRange(1024),
            help="Largest HTTP request head (request line and headers), complete or arriving; larger: 431.",
        ),
        click.option(
            "--header-timeout",
            "header_timeout_s",
            default=default("header_timeout_s"),
            show_default=True,
            type=click.FloatRange(0),
            help="Seconds a connection may take to send a request head; then 408 and closed (0: no limit).",
        ),
        click.option(
            "--max-body-bytes",
            default=default("max_body_bytes"),
            show_default=True,
            type=click.IntRange(1024),
            help="Largest HTTP request body on any route (call offers, key mints); larger: 413.",
        ),
        click.option(
            "--body-timeout",
            "body_timeout_s",
            default=default("body_timeout_s"),
            show_default=True,
            type=click.FloatRange(0.1),
            help="Seconds a request body may take to arrive in full after its head; then 408 and closed.",
        ),
        click.option(
            "--max-client-secret-mib",
            "max_client_secret_bytes",
            default=default("max_client_secret_bytes") // (1024 * 1024),
            show_default=True,
            type=click.IntRange(1),
            callback=lambda _ctx, _param, mib: mib * 1024 * 1024,
            help="MiB of session configuration all live ephemeral keys hold together (and at most 10,000 "
            "keys); past it a mint is refused with 429 until keys expire.",
        ),
    ]


def _audio_api(default: Callable[[str], Any]) -> list[Callable[[F], F]]:
    """OpenAI's audio API (``/v1/audio/*``): upload sizes, requests at once."""
    return [
        click.option(
            "--max-audio-bytes",
            default=default("max_audio_bytes"),
            show_default=True,
            type=click.IntRange(1024),
            help="Largest upload to /v1/audio/transcriptions (OpenAI's 25 MiB); more is refused with HTTP "
            "413.",
        ),
        click.option(
            "--max-audio-seconds",
            "max_audio_s",
            default=default("max_audio_s"),
            show_default=True,
            type=click.FloatRange(1),
            help="Longest audio /v1/audio/transcriptions decodes, in seconds; longer is refused with HTTP "
            "400.",
        ),
        click.option(
            "--max-audio-requests",
            default=default("max_audio_requests"),
            show_default=True,
            type=click.IntRange(1),
            help="/v1/audio/ requests (transcriptions, speech) served at once; more are refused with HTTP "
            "429.",
        ),
    ]


def _tls_and_calls(default: Callable[[str], Any]) -> list[Callable[[F], F]]:
    """TLS (https:// and wss://) and WebRTC calls."""
    return [
        click.option(
            "--ssl-certfile",
            type=click.Path(exists=True, dir_okay=False),
            default=None,
            help="PEM certificate (chain) to serve TLS: https:// and wss://. Needs --ssl-keyfile.",
        ),
        click.option(
            "--ssl-keyfile",
            type=click.Path(exists=True, dir_okay=False),
            default=None,
            help="PEM private key of --ssl-certfile.",
        ),
        click.option(
            "--webrtc-ice-servers",
            default=None,
            help="Comma-separated STUN/TURN URLs for WebRTC calls behind NAT (e.g. "
            "stun:stun.example.org:3478); "
            "without them only host candidates are offered (loopback, LAN).",
        ),
        click.option(
            "--webrtc-max-calls",
            default=default("webrtc_max_calls"),
            show_default=True,
            type=click.IntRange(1),
            help="WebRTC calls at once.",
        ),
    ]

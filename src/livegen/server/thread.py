"""Run the real server on a free loopback port in a background thread.

For tests and benchmarks that need a live server in their own process: the
same app and uvicorn as ``livegen serve``, on a socket bound before start so
that the port is known and never raced for. A config with ``ssl_certfile`` and
``ssl_keyfile`` serves TLS, as ``livegen serve --ssl-certfile/--ssl-keyfile``
does; the URLs then say ``https://`` and ``wss://``.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time

import uvicorn

from livegen.models import Registry
from livegen.server.app import create_app
from livegen.server.config import ServerConfig
from livegen.server.http.budgets import uvicorn_options


class ServerThread:
    def __init__(self, config: ServerConfig | None = None, registry: Registry | None = None) -> None:
        self.config = config or ServerConfig(api_key=None)
        self.app = create_app(self.config, registry)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        uv_config = uvicorn.Config(
            self.app,
            log_config=None,
            log_level="warning",
            **uvicorn_options(self.config),  # type: ignore[arg-type]
        )
        self._server = uvicorn.Server(uv_config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def http_url(self) -> str:
        return f"{'https' if self.config.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"{'wss' if self.config.tls else 'ws'}://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def wait_ready(self, timeout: float = 120.0, verify: ssl.SSLContext | bool = True) -> None:
        """Block until /health answers 200 (models loaded); ``verify`` trusts a TLS server's CA."""
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if httpx.get(f"{self.http_url}/health", verify=verify).status_code == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("the server did not become ready")

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._socket.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

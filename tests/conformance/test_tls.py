"""TLS: ``livegen serve --ssl-certfile/--ssl-keyfile`` serves https:// and wss:// (issue 13, item 4).

Clients that only dial ``wss://`` (the openai Node SDK rewrites every URL to
it) need the server itself to speak TLS. The certificate is made by the test
(``certs.py``) and clients trust its CA and nothing else: hostname and chain
are checked as a deployed client checks them.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time

import httpx
import pytest
from click.testing import CliRunner
from openai import AsyncOpenAI
from websockets.sync.client import connect

from conformance.certs import Certificates
from conformance.conftest import API_KEY
from livegen.cli import main
from livegen.server.thread import ServerThread

SDK = "openai-python 3.57.0 (GA)"


@pytest.mark.conformance(client=SDK, capability="tls")
async def test_https_and_a_realtime_session_over_wss(
    tls_server: ServerThread, certificates: Certificates
) -> None:
    assert tls_server.http_url.startswith("https://") and tls_server.ws_url.startswith("wss://")
    trust = certificates.client_context()
    async with httpx.AsyncClient(verify=trust) as http:
        health = await http.get(f"{tls_server.http_url}/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    async with httpx.AsyncClient(verify=ssl.create_default_context()) as http:
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the CA is refused
            await http.get(f"{tls_server.http_url}/health")

    client = AsyncOpenAI(
        api_key=API_KEY, base_url=f"{tls_server.http_url}/v1", websocket_base_url=f"{tls_server.ws_url}/v1"
    )
    options = {"ssl": trust}
    async with client.realtime.connect(model="gpt-realtime", websocket_connection_options=options) as rt:
        assert (await rt.recv()).type == "session.created"
        await rt.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}
        )
        await rt.response.create()
        kinds = []
        while not kinds or kinds[-1] != "response.done":
            event = await rt.recv()
            kinds.append(event.type)
        assert event.response.status == "completed"
        assert "response.output_audio.delta" in kinds and "error" not in kinds


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_livegen_serve_with_tls_flags_serves_https_and_wss(certificates: Certificates) -> None:
    port = _free_port()
    command = [sys.executable, "-m", "livegen", "serve", "--port", str(port), "--voice-model", "none"]
    command += ["--world-model", "procedural-world", "--log-level", "warning"]
    command += ["--ssl-certfile", str(certificates.cert_file), "--ssl-keyfile", str(certificates.key_file)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    trust = certificates.client_context()
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"https://127.0.0.1:{port}/health", verify=trust).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "the TLS server did not start"
            time.sleep(0.2)
        with connect(f"wss://127.0.0.1:{port}/v1/worlds", ssl=trust) as ws:
            ws.send(json.dumps({"type": "session.update", "session": {"seed": 1}}))
            assert json.loads(ws.recv(timeout=60))["type"] == "session.created"
        with pytest.raises(httpx.TransportError):  # plain http on the TLS port gets no answer
            httpx.get(f"http://127.0.0.1:{port}/health")
    except BaseException as failure:
        process.terminate()
        output = process.communicate(timeout=30)[0].decode(errors="replace")
        raise AssertionError(f"{failure!r}; the server said:\n{output[-3000:]}") from failure
    process.terminate()
    process.communicate(timeout=30)


def test_a_certificate_without_its_key_is_refused(certificates: Certificates) -> None:
    result = CliRunner().invoke(main, ["serve", "--ssl-certfile", str(certificates.cert_file)])
    assert result.exit_code == 2
    assert "both --ssl-certfile and --ssl-keyfile" in result.output

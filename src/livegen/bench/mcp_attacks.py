"""Hostile MCP servers against a real ``livegen serve``: the longest ``/health`` stall and the
server's RSS growth under each attack, for the tree it is pointed at (so old and new code compare).

``python -m livegen.bench.mcp_attacks [--tree DIR] [--json PATH]`` starts ``livegen serve`` from
``DIR/src`` (default: this checkout) in its own interpreter, allowed to reach the hostile server
(``mcp_hostile``, in this process) with a 20 s MCP deadline, its language model the hostile
server's scripted one. For each attack a fresh session names the hostile server(s) in one
``session.update`` and waits for every listing to end (for ``call-100mib``: for the response that
calls it); meanwhile a prober in a process of its own asks ``/health`` every 10 ms, and the
server's RSS (its process tree's) is sampled every 50 ms. Reported per attack: the longest and
median ``/health`` round trip, the RSS growth at its peak and 3 s after the attack ended, how the
listings or the call ended, and the seconds it took. A session naming a well-behaved server
warms the server up first, and is measured as the first row (``well-behaved``), the baseline.
Each attack gets a fresh server (``--shared``: one for all), so that memory one attack kept does
not hide the next one's growth.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from livegen.bench.fuzz import _free_port, _wait_healthy
from livegen.bench.mcp_hostile import Hostile, serve_hostile

#: Each attack: the hostile paths one session.update names (one MCP server each).
ATTACKS: dict[str, tuple[str, ...]] = {
    "well-behaved": ("ok",),
    "tools-10k": ("tools-10k",),
    "listing-200mib": ("listing-200mib",),
    "listing-endless": ("listing-endless",),
    "four-listings": ("listing-200mib", "listing-endless", "listing-200mib", "listing-endless"),
    "call-100mib": ("call-100mib",),
}
MIB = 1024 * 1024


def _health_probe(url: str, stop: Any, results: Any) -> None:
    import httpx

    times: list[float] = []
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            start = time.perf_counter()
            client.get(url)
            times.append((time.perf_counter() - start) * 1000.0)
            time.sleep(0.01)
    results.put(times)


def _rss(pid: int) -> int:
    import psutil

    try:
        process = psutil.Process(pid)
        return int(sum(p.memory_info().rss for p in [process, *process.children(recursive=True)]))
    except psutil.Error:
        return 0


async def _session(url: str, hostile: Hostile, paths: tuple[str, ...]) -> list[str]:
    """Name the hostile servers and wait for each listing (and the call) to end; how each ended."""
    import websockets

    tools = [
        {"type": "mcp", "server_label": f"h{i}", "server_url": hostile.url(p), "require_approval": "never"}
        for i, p in enumerate(paths)
    ]
    ended: list[str] = []
    async with websockets.connect(url, max_size=None) as ws:
        session = {"type": "realtime", "audio": {"input": {"turn_detection": None}}, "tools": tools}
        await ws.send(json.dumps({"type": "session.update", "session": session}))
        while len(ended) < len(paths):
            event = json.loads(await ws.recv())
            if event["type"] in ("mcp_list_tools.completed", "mcp_list_tools.failed", "error"):
                ended.append(event["type"])
        if paths == ("call-100mib",) and ended == ["mcp_list_tools.completed"]:
            text = [{"type": "input_text", "text": "Flood me."}]
            item = {"type": "message", "role": "user", "content": text}
            await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
            await ws.send(json.dumps({"type": "response.create"}))
            while (event := json.loads(await ws.recv()))["type"] != "response.done":
                if event["type"] == "conversation.item.done" and event["item"]["type"] == "mcp_call":
                    error = event["item"].get("error") or {}
                    ended.append(f"mcp_call: {error.get('message', 'completed')[:80]}")
    return ended


async def _attack(port: int, pid: int, hostile: Hostile, paths: tuple[str, ...]) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    stop, results = context.Event(), context.Queue()
    prober = context.Process(target=_health_probe, args=(f"http://127.0.0.1:{port}/health", stop, results))
    prober.start()
    await asyncio.sleep(1.0)  # the prober's interpreter starts first
    before, peak, start = _rss(pid), 0, time.monotonic()
    task = asyncio.ensure_future(_session(f"ws://127.0.0.1:{port}/v1/realtime", hostile, paths))
    while not task.done():
        peak = max(peak, _rss(pid))
        await asyncio.sleep(0.05)
    seconds = time.monotonic() - start
    await asyncio.sleep(3.0)
    after = _rss(pid)
    stop.set()
    times: list[float] = await asyncio.to_thread(results.get, True, 60)
    prober.join(30)
    return {
        "ended": task.result(),
        "seconds": round(seconds, 2),
        "health_max_ms": round(max(times), 1),
        "health_p50_ms": round(statistics.median(times), 1),
        "rss_before_mib": round(before / MIB),
        "rss_peak_growth_mib": round((max(peak, before) - before) / MIB),
        "rss_after_growth_mib": round((after - before) / MIB),
    }


def _serve(tree: Path, port: int, chat_url: str, log: Any) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "LIVEGEN_API_KEY"}
    env["PYTHONPATH"] = str(tree / "src")
    options = ["--port", str(port), "--world-model", "none", "--resume-grace", "0"]
    options += ["--mcp-allowed-hosts", "127.0.0.1", "--mcp-timeout", "20"]
    options += ["--llm-base-url", chat_url, "--llm-model", "tiny"]
    command = [sys.executable, "-m", "livegen", "serve", *options]
    return subprocess.Popen(command, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)


def _served(tree: Path, hostile: Hostile, names: tuple[str, ...], log: Any) -> dict[str, Any]:
    """Each of ``names`` against one server, warmed up by a well-behaved session first."""
    port = _free_port()
    server = _serve(tree, port, f"{hostile.base}/v1", log)
    report: dict[str, Any] = {}
    try:
        _wait_healthy(port, server, timeout=300)
        asyncio.run(_session(f"ws://127.0.0.1:{port}/v1/realtime", hostile, ("ok",)))  # warm up
        for name in names:
            report[name] = asyncio.run(_attack(port, server.pid, hostile, ATTACKS[name]))
            click.echo(f"{name}: {json.dumps(report[name])}", err=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return report


@click.command()
@click.option(
    "--tree", type=click.Path(file_okay=False, path_type=Path), default=None, help="Source tree to serve."
)
@click.option("--attack", "attacks", multiple=True, type=click.Choice(list(ATTACKS)), help="Only these.")
@click.option("--fresh/--shared", default=True, show_default=True, help="A fresh server for each attack.")
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the report here."
)
def main(tree: Path | None, attacks: tuple[str, ...], fresh: bool, json_path: str | None) -> None:
    tree = (tree or Path(__file__).resolve().parents[3]).resolve()
    names = attacks or tuple(ATTACKS)
    report: dict[str, Any] = {"tree": str(tree), "load": os.getloadavg()}
    with serve_hostile() as hostile, tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "server.log"
        with log_path.open("wb") as log:
            for batch in [(name,) for name in names] if fresh else [names]:
                report.update(_served(tree, hostile, batch, log))
        report["tracebacks"] = log_path.read_text(errors="replace").count("Traceback")
    text = json.dumps(report, indent=2)
    click.echo(text)
    if json_path:
        Path(json_path).write_text(text + "\n")


if __name__ == "__main__":
    main()

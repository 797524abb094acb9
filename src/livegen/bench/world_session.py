"""``livegen bench world-session``: the world control plane against vllm-omni's, side by side.

What is measured is the session layer alone, with a model step that does
nothing: events accepted per second (build the event from parsed JSON values,
validate, freeze, queue) and the overhead of one chunk transaction (snapshot
the pending events, run the no-op step, check the echo, commit). The baseline
is vllm-omni 0.30.0's own ``ARDiffusionSession``: its ``session.py`` and
``tick_protocol.py`` are read from the wheel on PyPI (downloaded once with
pip into ``~/.cache/livegen/vllm-omni``; vllm itself is not installed, and
the package modules those two files sit in are empty shims made here) and
driven through their async API, as upstream's own callers do. Both sides get
the same events, the same queue bound and the same number of events per tick.

A third, smaller figure: decoding ``world.event`` messages with the msgspec
codec (``protocol/world.py``, validating) against ``json.loads`` alone (not
validating), to show what validation costs.

Timings are taken per tick (the batch of events accepted before it, then the
tick itself) and summarised by their median, so that a run is not skewed by
the moments another process holds the CPU; events per second is the batch
size over the median batch time. Figures are medians of those over ``--runs``
runs, with the garbage collector paused while timing (both sides alike).
Ratios are oriented so that above 1 means livegen is better.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import statistics
import subprocess
import sys
import time
import types
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from tqdm import tqdm

from livegen.models.room import game
from livegen.models.world import Chunk, Tick
from livegen.protocol import world as wire
from livegen.world import ControlInput, Event, Session

VLLM_OMNI_VERSION = "0.30.0"
CACHE = Path.home() / ".cache" / "livegen" / "vllm-omni"
PACKAGE = "vllm_omni.experimental.ar_diffusion"
ACTIONS = ("up", "down", "left", "right", "none")


# -- the baseline --------------------------------------------------------------------------------
def load_upstream(cache: Path = CACHE) -> types.ModuleType:
    """vllm-omni's ``session`` module, loaded from the wheel's files (downloaded on first use)."""
    folder = cache / VLLM_OMNI_VERSION
    files = {name: folder / f"{name}.py" for name in ("tick_protocol", "session")}
    if not all(path.exists() for path in files.values()):
        _extract(_download(cache), folder)
    for name in ("vllm_omni", "vllm_omni.experimental", PACKAGE):
        shim = sys.modules.setdefault(name, types.ModuleType(name))
        shim.__path__ = []  # a package with nothing in it: only our two files load
    for name, path in files.items():
        spec = importlib.util.spec_from_file_location(f"{PACKAGE}.{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules[f"{PACKAGE}.session"]


def _download(cache: Path) -> Path:
    wheel = cache / f"vllm_omni-{VLLM_OMNI_VERSION}-py3-none-any.whl"
    if not wheel.exists():
        cache.mkdir(parents=True, exist_ok=True)
        click.echo(f"downloading vllm-omni {VLLM_OMNI_VERSION} from PyPI (once) into {cache}", err=True)
        command = [sys.executable, "-m", "pip", "download", f"vllm-omni=={VLLM_OMNI_VERSION}"]
        subprocess.run([*command, "--no-deps", "-d", str(cache), "-q"], check=True)
    return wheel


def _extract(wheel: Path, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        for name in ("tick_protocol", "session"):
            member = f"vllm_omni/experimental/ar_diffusion/{name}.py"
            (folder / f"{name}.py").write_bytes(archive.read(member))


class _NoopConsumer:
    """Upstream's tick consumer with a model step that does nothing."""

    def __init__(self, upstream: types.ModuleType) -> None:
        self._metadata = upstream.ARDiffusionChunkMetadata

    async def execute_tick(self, tick: Any) -> Any:
        return tick

    def chunk_metadata(self, output: Any) -> Any:
        return self._metadata.from_tick(output)


class _NoopLifecycle:
    async def reset_session(self, session_id: str) -> None:
        pass

    async def close_session(self, session_id: str) -> None:
        pass


# -- the workload --------------------------------------------------------------------------------
def workload_events(num_events: int) -> list[tuple[int, str | None, str, str, dict[str, str]]]:
    """The same events for both sides, as parsed JSON values: (id, prompt, track, schema, data)."""
    return [
        (
            i + 1,
            "a lava room" if i % 8 == 0 else None,
            "action",
            "livegen.action.v1",
            {"action": ACTIONS[i % 5]},
        )
        for i in range(num_events)
    ]


def _noop_step(ticks: list[Tick], frames: Any) -> list[Chunk]:
    return [Chunk(tick.meta, frames) for tick in ticks]


def run_livegen(events: list[Any], events_per_tick: int) -> tuple[list[float], list[float]]:
    """(seconds to accept each tick's batch of events, seconds per tick) for livegen's core."""
    session = Session(
        "bench",
        tracks=game.room_spec().controls,
        new_id=lambda: uuid.uuid4().hex,
        max_pending_events=events_per_tick,
    )
    frames = None
    accepts: list[float] = []
    ticks: list[float] = []
    clock = time.perf_counter
    for start in range(0, len(events), events_per_tick):
        batch = events[start : start + events_per_tick]
        t0 = clock()
        for event_id, prompt, track, schema, data in batch:
            session.accept(Event.of(event_id, prompt, [ControlInput.of(track, schema, data)]))
        t1 = clock()
        plan = session.begin_tick()
        meta = plan.meta
        tick = Tick(meta, plan.seed, plan.prompt, plan.control_data())
        [chunk] = _noop_step([tick], frames)
        session.commit_tick(plan, chunk.meta, chunk)
        session.take_effects()
        t2 = clock()
        accepts.append(t1 - t0)
        ticks.append(t2 - t1)
    _check_done(session.chunk_index, session.pending_event_count, len(ticks))
    return accepts, ticks


def _check_done(chunk_index: int, num_pending: int, num_ticks: int) -> None:
    """Both sides must have done the whole workload: every event applied, every tick committed."""
    if chunk_index != num_ticks or num_pending:
        raise RuntimeError(f"workload incomplete: {chunk_index} of {num_ticks} chunks, {num_pending} pending")


async def run_upstream(
    upstream: types.ModuleType, events: list[Any], events_per_tick: int
) -> tuple[list[float], list[float]]:
    """The same for vllm-omni's ``ARDiffusionSession``, through its async API."""
    session = upstream.ARDiffusionSession(
        "bench",
        tick_consumer=_NoopConsumer(upstream),
        lifecycle=_NoopLifecycle(),
        max_pending_events=events_per_tick,
    )
    control_type = sys.modules[f"{PACKAGE}.tick_protocol"].ARDiffusionControlInput
    event_type = upstream.ARDiffusionSessionEvent
    accepts: list[float] = []
    ticks: list[float] = []
    clock = time.perf_counter
    for start in range(0, len(events), events_per_tick):
        batch = events[start : start + events_per_tick]
        t0 = clock()
        for event_id, prompt, track, schema, data in batch:
            control = control_type(track=track, schema=schema, data=data)
            await session.accept_event(event_type(event_id=event_id, prompt=prompt, controls=(control,)))
        t1 = clock()
        await session.next_chunk()
        t2 = clock()
        accepts.append(t1 - t0)
        ticks.append(t2 - t1)
    _check_done(session.chunk_index, session.pending_event_count, len(ticks))
    return accepts, ticks


def run_codec(messages: list[bytes], batch: int = 100) -> tuple[float, float]:
    """Median seconds per message to decode with the msgspec codec, and with ``json.loads``."""
    ours: list[float] = []
    plain: list[float] = []
    clock = time.perf_counter
    for start in range(0, len(messages), batch):
        chunk = messages[start : start + batch]
        t0 = clock()
        for raw in chunk:
            wire.decode_client(raw)
        t1 = clock()
        for raw in chunk:
            json.loads(raw)
        t2 = clock()
        ours.append((t1 - t0) / len(chunk))
        plain.append((t2 - t1) / len(chunk))
    return statistics.median(ours), statistics.median(plain)


def _messages(events: list[Any]) -> list[bytes]:
    return [
        json.dumps(
            {
                "type": "world.event",
                "event_id": event_id,
                **({"prompt": prompt} if prompt else {}),
                "controls": [{"track": track, "schema": schema, "data": data}],
            }
        ).encode()
        for event_id, prompt, track, schema, data in events
    ]


def measure(num_events: int, events_per_tick: int, num_runs: int) -> dict[str, Any]:
    upstream = load_upstream()
    events = workload_events(num_events)
    messages = _messages(events)
    runs: list[dict[str, float]] = []
    for _ in tqdm(range(num_runs), desc="world-session", unit="run"):
        gc.collect()
        gc.disable()  # collections land at random in either side's timings otherwise
        try:
            ours_accept, ours_ticks = run_livegen(events, events_per_tick)
            theirs_accept, theirs_ticks = asyncio.run(run_upstream(upstream, events, events_per_tick))
            codec_s, json_s = run_codec(messages)
        finally:
            gc.enable()
        runs.append(
            {
                "livegen_events_per_s": events_per_tick / statistics.median(ours_accept),
                "vllm_omni_events_per_s": events_per_tick / statistics.median(theirs_accept),
                "livegen_tick_overhead_us": statistics.median(ours_ticks) * 1e6,
                "vllm_omni_tick_overhead_us": statistics.median(theirs_ticks) * 1e6,
                "codec_messages_per_s": 1 / codec_s,
                "json_loads_messages_per_s": 1 / json_s,
            }
        )
    median: Callable[[str], float] = lambda key: statistics.median(run[key] for run in runs)  # noqa: E731
    ours = {
        "events_per_s": median("livegen_events_per_s"),
        "tick_overhead_us": median("livegen_tick_overhead_us"),
    }
    theirs = {
        "events_per_s": median("vllm_omni_events_per_s"),
        "tick_overhead_us": median("vllm_omni_tick_overhead_us"),
    }
    return {
        "benchmark": "world-session",
        "workload": {
            "num_events": num_events,
            "events_per_tick": events_per_tick,
            "num_ticks": -(-num_events // events_per_tick),
            "num_runs": num_runs,
            "model_step": "no-op",
            "baseline": f"vllm-omni {VLLM_OMNI_VERSION} experimental/ar_diffusion ARDiffusionSession",
            "python": sys.version.split()[0],
        },
        "livegen": ours,
        "vllm_omni": theirs,
        "events_per_s_ratio": ours["events_per_s"] / theirs["events_per_s"],
        "tick_overhead_ratio": theirs["tick_overhead_us"] / ours["tick_overhead_us"],
        "codec": {
            "msgspec_messages_per_s": median("codec_messages_per_s"),
            "json_loads_messages_per_s": median("json_loads_messages_per_s"),
            "ratio": median("codec_messages_per_s") / median("json_loads_messages_per_s"),
            "note": "msgspec decodes and validates; json.loads only parses",
        },
        "runs": runs,
    }


@click.command("world-session")
@click.option(
    "--events",
    "num_events",
    default=20_000,
    show_default=True,
    type=click.IntRange(1),
    help="Events per run.",
)
@click.option(
    "--events-per-tick",
    default=4,
    show_default=True,
    type=click.IntRange(1),
    help="Events queued before each tick.",
)
@click.option(
    "--runs", "num_runs", default=5, show_default=True, type=click.IntRange(1), help="Runs; medians reported."
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the figures here."
)
def world_session(num_events: int, events_per_tick: int, num_runs: int, json_path: Path | None) -> None:
    """World control plane (no-op model) vs vllm-omni's ARDiffusionSession: events/s and per-tick overhead."""
    result = measure(num_events, events_per_tick, num_runs)
    ours, theirs = result["livegen"], result["vllm_omni"]
    click.echo(f"{'':24}{'livegen':>14}{'vllm-omni':>14}{'ratio':>9}")
    click.echo(
        f"{'events accepted / s':24}{ours['events_per_s']:>14,.0f}{theirs['events_per_s']:>14,.0f}"
        f"{result['events_per_s_ratio']:>9.2f}"
    )
    click.echo(
        f"{'tick overhead (us)':24}{ours['tick_overhead_us']:>14.2f}{theirs['tick_overhead_us']:>14.2f}"
        f"{result['tick_overhead_ratio']:>9.2f}"
    )
    codec = result["codec"]
    click.echo(
        f"codec: msgspec {codec['msgspec_messages_per_s']:,.0f} msg/s (validating) vs "
        f"json.loads {codec['json_loads_messages_per_s']:,.0f} msg/s (parse only), ratio {codec['ratio']:.2f}"
    )
    click.echo("medians over runs; ratios above 1 mean livegen is better")
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2))

"""``livegen bench voice-barge-in``: what interrupts an answer, and what noise reduction buys.

Two parts, both on the embedded cascade, with every sound made here (nothing
checked in):

- **Over an answer** (a real server on a loopback port, the Realtime protocol
  over a WebSocket, server VAD, ``interrupt_response`` on): a user asks "What
  can you do?", and half a second into the spoken answer a disturbance is
  played at the pace of speech. Disturbances are noise (white, babble of four
  espeak-ng voices, cough-like bursts) and backchannels ("mm-hmm", "uh-huh",
  "hmm", "yeah" in two voices); a false barge-in is a ``speech_started`` or a
  cancelled answer after it. Real barge-ins are short questions in the same
  voices: the share caught, and from the speech's first sound to
  ``speech_started`` (p50). Each runs as a default session (server VAD, no
  noise reduction: no gate, any speech start interrupts), with the gate
  forced on (what ``semantic_vad`` sessions get; server VAD here, so that
  only the gate differs), and with each noise reduction (which turns the
  gate on).
  ``--condition`` and ``--kind`` run only some sessions and sounds (a
  two-minute run: the gate's real interruptions, or its false barge-ins).
- **Word error rate with the denoiser**: the recogniser benchmark's held-out
  set (``recognisers.build_set``: 12 sentences x 4 voices, clean and with pink
  noise at 10 dB and 5 dB) decoded by the default recogniser as heard, and
  after each ``noise_reduction`` tuning; and the denoiser's real-time factor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from livegen.bench.voice_turns import WIRE_RATE, ServerTurns, _ServerCall, synthesise

QUESTION = "What can you do?"
#: (label, text) spoken over the answer by each of ``VOICES``.
BACKCHANNELS = (("mm-hmm", "Mm-hmm."), ("uh-huh", "Uh-huh."), ("hmm", "Hmm."), ("yeah", "Yeah."))
INTERRUPTIONS = ("Wait, what time is it?", "Stop. What is two plus two?", "Sorry, can you say that again?")
VOICES = ("espeak:en-us+m2", "espeak:en-gb-scotland+f3")
BABBLE = (
    "The meeting moved to the second floor this week.",
    "I think the train was late again this morning.",
    "Have you tried the new place on the corner?",
    "We should leave before the traffic gets bad.",
)
#: (label, the gate forced on or off or None: the session's rule, noise_reduction).
CONDITIONS: tuple[tuple[str, bool | None, str | None], ...] = (
    ("no gate (default session)", None, None),
    ("gate (as semantic_vad), no NR", True, None),
    ("gate, near_field", None, "near_field"),
    ("gate, far_field", None, "far_field"),
)
#: Short names of ``CONDITIONS`` for ``--condition``.
CONDITION_KEYS = ("none", "gate", "near_field", "far_field")
KINDS = ("noise", "backchannel", "speech")
SEED = 15


@dataclass(frozen=True)
class Sound:
    kind: str  # "noise", "backchannel" or "speech"
    label: str
    pcm24: bytes


@dataclass(frozen=True)
class Trial:
    condition: str
    kind: str
    label: str
    interrupted: bool
    #: From the sound's first sample to ``speech_started``, if one came.
    detect_ms: float | None


def _pcm(samples: np.ndarray) -> bytes:
    data: bytes = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
    return data


def _at_rms(samples: np.ndarray, rms: float) -> np.ndarray:
    scaled: np.ndarray = samples * (rms / (float(np.sqrt(np.mean(samples**2))) + 1e-12))
    return scaled


def _speech(model: Any, text: str, voice: str) -> np.ndarray:
    pcm = model.speak(text, voice).result(timeout=120).pcm
    return np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0


def sounds(model: Any) -> list[Sound]:
    """The disturbances and the real interruptions, at the wire's rate."""
    rng = np.random.default_rng(SEED)
    lead = np.zeros(WIRE_RATE // 5, np.float32)
    made: list[Sound] = [
        Sound("noise", "white 1.5 s", _pcm(_at_rms(rng.standard_normal(3 * WIRE_RATE // 2), 0.05)))
    ]
    voices = [
        _speech(model, text, f"espeak:en-us+{v}")
        for text, v in zip(BABBLE, ("m1", "f2", "m3", "f4"), strict=True)
    ]
    length = min(len(v) for v in voices)
    made.append(
        Sound("noise", "babble 4 voices", _pcm(_at_rms(np.sum([v[:length] for v in voices], axis=0), 0.05)))
    )
    for ms, voiced in ((200, False), (350, False), (300, True)):
        n = WIRE_RATE * ms // 1000
        burst = rng.standard_normal(n) * np.exp(-np.linspace(0, 5, n))
        if voiced:  # a cough with a vocal onset: the burst rides a 140 Hz buzz
            burst *= 1 + 0.8 * np.sign(np.sin(2 * np.pi * 140 * np.arange(n) / WIRE_RATE))
        made.append(
            Sound(
                "noise",
                f"cough {ms} ms{' voiced' if voiced else ''}",
                _pcm(0.6 * burst / np.abs(burst).max()),
            )
        )
    for voice in VOICES:
        short = voice.split(":")[1]
        for label, text in BACKCHANNELS:
            made.append(
                Sound(
                    "backchannel",
                    f"{label} ({short})",
                    _pcm(np.concatenate([lead, _speech(model, text, voice)])),
                )
            )
        for text in INTERRUPTIONS:
            made.append(
                Sound(
                    "speech", f"{text} ({short})", _pcm(np.concatenate([lead, _speech(model, text, voice)]))
                )
            )
    return made


@contextlib.contextmanager
def _gate(is_on: bool | None) -> Iterator[None]:
    """Sessions get the gate ``is_on`` whatever they ask (None: as they ask); the server runs in
    this process, so its streams read the rule from the module."""
    from livegen.models.cascade import barge_in

    kept = barge_in.is_wanted
    if is_on is not None:
        barge_in.is_wanted = lambda config: is_on
    try:
        yield
    finally:
        barge_in.is_wanted = kept


async def _trial(
    server: Any, question: Any, sound: Sound, condition: tuple[str, bool | None, str | None]
) -> Trial:
    import websockets

    label, _, reduction = condition
    async with websockets.connect(f"{server.ws_url}/v1/realtime?model=cascade", max_size=None) as socket:
        call = _ServerCall(socket)
        try:
            await call.configure(500)
            if reduction is not None:
                session = {"type": "realtime", "audio": {"input": {"noise_reduction": {"type": reduction}}}}
                await socket.send(json.dumps({"type": "session.update", "session": session}))
            await call.feed(question.pcm24)
            await call.feed(bytes(2 * 6 * WIRE_RATE), until=lambda: call.first("response.output_audio.delta"))
            old = call.first_event("response.created", "response", "id")
            await call.feed(bytes(WIRE_RATE))  # half a second of the answer plays
            mark = len(call.log)
            onset = time.perf_counter() + _lead_s_of(sound.pcm24)
            await call.feed(sound.pcm24 + bytes(2 * 2 * WIRE_RATE))
            started = call.first("input_audio_buffer.speech_started", after=mark)
            cancelled = any(
                e["response"]["id"] == old and e["response"]["status"] == "cancelled"
                for _, e in call.of("response.done", after=mark)
            )
        finally:
            await call.close()
    detect = None if started is None else (started - onset) * 1000
    return Trial(label, sound.kind, sound.label, started is not None or cancelled, detect)


def _lead_s_of(pcm24: bytes) -> float:
    samples = np.frombuffer(pcm24, "<i2")
    loud = np.flatnonzero(np.abs(samples) > 327)
    return float(loud[0]) / WIRE_RATE if loud.size else 0.0


def over_answer(
    model: Any, rounds: int, conditions: tuple[str, ...] = (), kinds: tuple[str, ...] = ()
) -> list[Trial]:
    """Each sound of ``kinds`` over an answer under each of ``conditions`` (by key; empty: all)."""
    question = synthesise(model, QUESTION)
    made = [sound for sound in sounds(model) if not kinds or sound.kind in kinds]
    server = ServerTurns(500)
    trials: list[Trial] = []
    try:
        for key, condition in zip(CONDITION_KEYS, CONDITIONS, strict=True):
            if conditions and key not in conditions:
                continue
            with _gate(condition[1]):
                for _ in range(rounds):
                    for sound in made:
                        trials.append(asyncio.run(_trial(server.server, question, sound, condition)))
                        click.echo(f"  {condition[0]}: {sound.label}: {trials[-1].interrupted}", err=True)
    finally:
        server.close()
    return trials


def denoised_wer(model: Any) -> dict[str, Any]:
    """WER of the default recogniser on the held-out set as heard and after each tuning; denoiser RTF."""
    from livegen.bench import recognisers
    from livegen.bench.voice_model import wer
    from livegen.models.cascade import denoise

    clips = recognisers.build_set(model)
    recognizer = model.recognizer_for("")
    recognizer.transcribe(np.zeros(8000, np.float32))  # warm
    table: dict[str, dict[str, float]] = {}
    ratios: list[float] = []
    for reduction in (None, *denoise.TUNINGS):
        pairs: dict[str, list[tuple[str, str]]] = {}
        denoisers: dict[tuple[str, str], denoise.Denoiser] = {}  # one per voice and level, as a session
        for clip in clips:
            level = recognisers.noise_label(clip.snr_db)
            audio = clip.audio
            if reduction is not None:
                denoiser = denoisers.setdefault((clip.voice, level), denoise.Denoiser(reduction))
                padded = np.concatenate([audio, np.zeros(denoise.SAMPLE_RATE // 5, np.float32)])
                began = time.perf_counter()
                out = denoiser.process(_pcm(padded))
                ratios.append((time.perf_counter() - began) / (len(padded) / denoise.SAMPLE_RATE))
                audio = np.frombuffer(out, "<i2").astype(np.float32) / 32768.0
            pairs.setdefault(level, []).append((clip.text, recognizer.transcribe(audio).text))
        table[reduction or "off"] = {level: wer(items) for level, items in pairs.items()}
    return {"wer": table, "denoiser_rtf_p50": statistics.median(ratios), "num_clips": len(clips)}


def summarise(trials: list[Trial]) -> dict[str, dict[str, Any]]:
    """Per condition: false barge-ins by kind, real ones caught, detection p50."""
    summary: dict[str, dict[str, Any]] = {}
    for label, *_ in CONDITIONS:
        mine = [t for t in trials if t.condition == label]
        if not mine:
            continue
        row: dict[str, Any] = {}
        for kind in ("noise", "backchannel"):
            of_kind = [t for t in mine if t.kind == kind]
            row[f"false_{kind}"] = f"{sum(t.interrupted for t in of_kind)}/{len(of_kind)}"
        real = [t for t in mine if t.kind == "speech"]
        row["real_caught"] = f"{sum(t.interrupted for t in real)}/{len(real)}"
        detects = [t.detect_ms for t in real if t.detect_ms is not None]
        row["real_detect_p50_ms"] = statistics.median(detects) if detects else None
        row["interrupting"] = sorted({t.label for t in mine if t.kind != "speech" and t.interrupted})
        summary[label] = row
    return summary


def render(summary: dict[str, dict[str, Any]], wers: dict[str, Any] | None) -> str:
    header = "| condition | false barge-ins: noise | backchannels | real caught | onset -> started p50 |"
    lines = [header, "|---|---|---|---|---|"] if summary else []  # ``--part wer``: no barge-in table
    for label, row in summary.items():
        p50 = row["real_detect_p50_ms"]
        lines.append(
            f"| {label} | {row['false_noise']} | {row['false_backchannel']} | {row['real_caught']} | "
            f"{'-' if p50 is None else f'{p50:.0f} ms'} |"
        )
    for label, row in summary.items():
        if row["interrupting"]:
            lines.append(f"  {label}: interrupted by {', '.join(row['interrupting'])}")
    if wers is not None:
        levels = list(next(iter(wers["wer"].values())))
        lines += ["", "| noise_reduction | " + " | ".join(levels) + " |", "|---" * (len(levels) + 1) + "|"]
        for reduction, row in wers["wer"].items():
            lines.append(f"| {reduction} | " + " | ".join(f"{row[level]:.3f}" for level in levels) + " |")
        lines.append(f"denoiser RTF p50 {wers['denoiser_rtf_p50']:.3f} over {wers['num_clips']} clips")
    return "\n".join(lines)


@click.command("voice-barge-in")
@click.option(
    "--rounds", default=1, show_default=True, type=click.IntRange(1), help="Passes over the sounds."
)
@click.option(
    "--part",
    type=click.Choice(["all", "barge-in", "wer"]),
    default="all",
    show_default=True,
    help="Only the answer's interruptions, or only the WER with the denoiser.",
)
@click.option(
    "--condition",
    "conditions",
    multiple=True,
    type=click.Choice(CONDITION_KEYS),
    help="Only these sessions (repeatable; default all): no gate, the gate forced on, each noise_reduction.",
)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(KINDS),
    help="Only these sounds (repeatable; default all): noise, backchannels, real interruptions.",
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write results here."
)
def command(
    rounds: int, part: str, conditions: tuple[str, ...], kinds: tuple[str, ...], json_path: Path | None
) -> None:
    """Benchmark barge-in over an answer (noise, backchannels, real questions) and the denoiser's WER."""
    from livegen.models.cascade import model as cascade

    click.echo("loading the cascade (Whisper, Piper worker)...", err=True)
    loaded = cascade.load()
    loaded.use_llm(None, None)
    try:
        trials = over_answer(loaded, rounds, conditions, kinds) if part in ("all", "barge-in") else []
        wers = denoised_wer(loaded) if part in ("all", "wer") else None
    finally:
        loaded.close()
    summary = summarise(trials) if trials else {}
    click.echo(f"voice-barge-in: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
    click.echo(render(summary, wers))
    if json_path is not None:
        trial_rows = [t.__dict__ for t in trials]
        json_path.write_text(json.dumps({"summary": summary, "wer": wers, "trials": trial_rows}, indent=2))
        click.echo(f"wrote {json_path}")

"""``livegen bench voice-model``: the embedded cascade's speed, accuracy and turn latency.

Speech for the benchmark is synthesised by espeak-ng in a formant voice
(``USER_VOICE``), unlike the assistant's neural Piper voice, and is fed in
20 ms chunks at the pace of speech, as a microphone would. The figures:

- real-time factor of each stage (Silero, Whisper with its short window and
  with the 30 s window as the baseline, Piper, espeak-ng);
- word error rate of the transcripts of the spoken questions;
- time from the end of the user's speech to the first audio of the answer,
  p50 and p95, and that time minus the silence window, with speculation on
  and, as the baseline in the same run, off;
- barge-in: from ``input_audio_buffer.speech_started`` to the last audio of
  the old answer;
- every recogniser side by side on a held-out set in several voices, clean
  and in noise: word error rate by voice and noise level, real-time factor,
  and speech_stopped to final transcript on a session's stream, p50 and p95
  (``recognisers``; ``--part recognisers`` runs only this);
- turn cut-offs: the share of mid-sentence pauses that end the turn under
  ``server_vad`` and ``semantic_vad``, the delay at real ends, and the
  end-of-turn model's time per call (``turn_cutoffs``; ``--part cutoffs``).

By default the turns go through a real server on a loopback port, as a
client under server VAD sees them (``--transport server``); ``--transport
contract`` drives the model's ``VoiceStream`` directly, the way the session
runtime does, which leaves the server out of the figures (see
``voice_turns``). The report says which.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np

from livegen.bench import recognisers, turn_cutoffs, voices
from livegen.bench.voice_turns import (
    USER_VOICE,
    ContractTurns,
    ServerTurns,
    TurnResult,
    Turns,
    Utterance,
    synthesise,
)
from livegen.models.voice import TurnDetection

PROMPTS = (
    "What is twelve times seven?",
    "What time is it?",
    "What is the date today?",
    "What can you do?",
    "Tell me a joke.",
    "How are you today?",
    "What is one hundred plus twenty five?",
    "Repeat after me, good morning everyone.",
    "What is the square root of eighty one?",
    "What is the capital of France?",
)
#: The question whose long answer the barge-in trials interrupt, and what interrupts it.
LONG_ANSWER_PROMPT = "What can you do?"
INTERRUPTION = "Stop. What time is it?"


@dataclass
class Report:
    transport: str
    machine: dict[str, Any]
    settings: dict[str, Any]
    rtf: dict[str, Any] = field(default_factory=dict)
    wer: dict[str, Any] = field(default_factory=dict)
    latency_ms: dict[str, Any] = field(default_factory=dict)
    barge_in_ms: dict[str, Any] = field(default_factory=dict)
    speculation: dict[str, Any] = field(default_factory=dict)
    turns: list[dict[str, Any]] = field(default_factory=list)
    recognisers: dict[str, Any] = field(default_factory=dict)
    turn_cutoffs: dict[str, Any] = field(default_factory=dict)
    voices: dict[str, Any] = field(default_factory=dict)


# -- word error rate ----------------------------------------------------------------------------

_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30,
    "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
}  # fmt: skip


def normalise(text: str) -> list[str]:
    """Lower-case words without punctuation, number words as digits ("eighty one" -> "81")."""
    words = re.findall(r"[a-z0-9']+", text.lower().replace("-", " "))
    out: list[str] = []
    number: int | None = None
    for word in [*words, ""]:
        if word in _NUMBER_WORDS or (word == "hundred" and number is not None):
            value = _NUMBER_WORDS.get(word, 0)
            number = number * 100 if word == "hundred" and number else (number or 0) + value
            continue
        if number is not None:
            out.append(str(number))
            number = None
        if word and word != "and":
            out.append(word)
    return out


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(edit distance in words, number of reference words)."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, ref_word in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, hyp_word in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ref_word != hyp_word))
    return row[-1], len(ref)


def wer(pairs: Sequence[tuple[str, str]]) -> float:
    errors = [word_errors(reference, hypothesis) for reference, hypothesis in pairs]
    return sum(e for e, _ in errors) / max(1, sum(n for _, n in errors))


# -- real-time factors --------------------------------------------------------------------------


def stage_rtf(model: Any, utterances: Sequence[Utterance], answers: Sequence[str]) -> dict[str, Any]:
    from livegen.models.cascade import vad

    audio_s = sum(u.seconds for u in utterances)
    detector = vad.Detector(model.vad_path, TurnDetection())
    started = time.perf_counter()
    for utterance in utterances:
        detector.feed(utterance.pcm16)
    vad_rtf = (time.perf_counter() - started) / audio_s

    short: list[float] = []
    full: list[float] = []
    for utterance in utterances:
        samples = np.frombuffer(utterance.pcm16, "<i2").astype(np.float32) / 32768.0
        for window, results in ((None, short), (30, full)):
            began = time.perf_counter()
            model.recognizer.transcribe(samples, window_s=window)
            results.append((time.perf_counter() - began) / utterance.seconds)
    return {
        "vad_silero": vad_rtf,
        "asr_whisper_short_window": statistics.median(short),
        "asr_whisper_30s_window_baseline": statistics.median(full),
        "asr_speedup_vs_30s_window": statistics.median(full) / statistics.median(short),
        "tts_piper": _tts_rtf(model, answers, ""),
        "tts_espeak": _tts_rtf(model, answers, "espeak"),
    }


def _tts_rtf(model: Any, texts: Sequence[str], voice: str) -> float:
    ratios = []
    for text in texts:
        began = time.perf_counter()
        speech = model.speak(text, voice).result(timeout=120)
        ratios.append((time.perf_counter() - began) / max(1e-3, len(speech.pcm) / 48_000))
    return statistics.median(ratios)


# -- the run ------------------------------------------------------------------------------------


def percentiles(values: Sequence[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"n": len(ordered), "p50": statistics.median(ordered), "p95": p95, "max": ordered[-1]}


async def run(model: Any, turns: Turns, num_rounds: int, num_barge_ins: int, silence_ms: int) -> Report:
    from tqdm import tqdm

    report = Report(
        transport=turns.transport,
        machine={"cpus": os.cpu_count(), "load_average": list(os.getloadavg())},
        settings={"silence_ms": silence_ms, "rounds": num_rounds, "user_voice": USER_VOICE},
    )
    utterances = [synthesise(model, text) for text in tqdm(PROMPTS, desc="synthesising questions")]
    latencies: dict[str, list[float]] = {"speculative": [], "baseline": []}
    stops: list[float] = []
    #: First audio after speech_stopped, by mode: how ready the answer was when the turn ended.
    after_stop: dict[str, list[float]] = {mode: [] for mode in latencies}
    results: list[TurnResult] = []
    steps = [(mode, u) for _ in range(num_rounds) for mode in latencies for u in utterances]
    for mode, utterance in tqdm(steps, desc="spoken turns"):
        model.is_speculative = mode == "speculative"
        result = await turns.turn(utterance)
        if result.first_audio_ms is not None:
            latencies[mode].append(result.first_audio_ms)
        if result.speech_stopped_ms is not None:
            stops.append(result.speech_stopped_ms)
            if result.first_audio_ms is not None:
                after_stop[mode].append(result.first_audio_ms - result.speech_stopped_ms)
        if mode == "speculative":
            results.append(result)
    model.is_speculative = True
    _latency_report(report, latencies, silence_ms)
    report.latency_ms["speech_stopped"] = percentiles(stops)
    report.latency_ms["after_speech_stopped"] = {mode: percentiles(v) for mode, v in after_stop.items()}
    report.wer = {
        "transcripts": wer([(r.prompt, r.transcript) for r in results]),
        "num_words": sum(len(normalise(r.prompt)) for r in results),
    }
    report.turns = [asdict(r) for r in results[: len(utterances)]]
    long_question = synthesise(model, LONG_ANSWER_PROMPT)
    interruption = synthesise(model, INTERRUPTION, lead_s=0.0)
    barge = [
        await turns.barge_in(long_question, interruption) for _ in tqdm(range(num_barge_ins), "barge-in")
    ]
    heard = [b for b in barge if b is not None]
    report.barge_in_ms = {
        **percentiles([b.cut_ms for b in heard]),
        "detect": percentiles([b.detect_ms for b in heard]),
        "num_missed": len(barge) - len(heard),
    }
    report.rtf = stage_rtf(model, utterances, [r.answer for r in results[: len(utterances)] if r.answer])
    stats = model.stats
    report.speculation = {
        "num_speculations": stats.num_speculations,
        "num_settled": stats.num_settled,
        "num_hits": stats.num_speculation_hits,
        "num_prepared_answers_used": stats.num_prepared_used,
    }
    return report


def _latency_report(report: Report, latencies: dict[str, list[float]], silence_ms: int) -> None:
    for mode, values in latencies.items():
        summary: dict[str, Any] = percentiles(values)
        if values:
            summary["p50_beyond_silence"] = summary["p50"] - silence_ms
            summary["p95_beyond_silence"] = summary["p95"] - silence_ms
        report.latency_ms[mode] = summary
    spec, base = latencies["speculative"], latencies["baseline"]
    if spec and base:
        report.latency_ms["p50_ratio_speculative_vs_baseline"] = statistics.median(spec) / statistics.median(
            base
        )


def render(report: Report) -> str:
    lines = [f"voice-model benchmark ({report.transport}; load average {report.machine['load_average']})"]
    if report.recognisers:
        lines += recognisers.render(report.recognisers)
    if report.turn_cutoffs:
        lines += turn_cutoffs.render(report.turn_cutoffs)
    if report.voices:
        lines += voices.render(report.voices)
    if not report.rtf:
        return "\n".join(lines)
    lines.append("real-time factor (compute seconds per second of audio):")
    lines += [f"  {name:<34} {value:8.3f}" for name, value in report.rtf.items()]
    lines.append(f"word error rate: {report.wer['transcripts']:.3f} over {report.wer['num_words']} words")
    lines.append("end of speech -> first answer audio (ms):")
    for mode in ("speculative", "baseline"):
        s = report.latency_ms.get(mode, {})
        if s.get("n"):
            lines.append(
                f"  {mode:<12} p50 {s['p50']:7.0f}  p95 {s['p95']:7.0f}  beyond the silence window: "
                f"p50 {s['p50_beyond_silence']:6.0f}  p95 {s['p95_beyond_silence']:6.0f}"
            )
    if report.latency_ms.get("speech_stopped", {}).get("n"):
        stopped = report.latency_ms["speech_stopped"]
        lines.append(f"  (the detector's speech stop: p50 {stopped['p50']:.0f}, p95 {stopped['p95']:.0f})")
        for mode, after in report.latency_ms["after_speech_stopped"].items():
            if after.get("n"):
                lines.append(
                    f"  {mode}: speech_stopped -> first audio p50 {after['p50']:.0f}, p95 {after['p95']:.0f}"
                )
    if "p50_ratio_speculative_vs_baseline" in report.latency_ms:
        lines.append(
            f"  p50 ratio speculative/baseline: {report.latency_ms['p50_ratio_speculative_vs_baseline']:.2f}"
        )
    b = report.barge_in_ms
    if b.get("n"):
        lines.append(
            f"barge-in, speech_started -> last old audio (ms): p50 {b['p50']:.1f}  p95 {b['p95']:.1f}"
        )
        lines.append(f"  (user starts talking -> speech_started: p50 {b['detect']['p50']:.0f} ms)")
    lines.append(f"speculation: {report.speculation}")
    return "\n".join(lines)


@click.command("voice-model")
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the report here."
)
@click.option(
    "--rounds", default=1, show_default=True, type=click.IntRange(1), help="Passes over the questions."
)
@click.option(
    "--barge-ins", default=5, show_default=True, type=click.IntRange(0), help="Interruption trials."
)
@click.option(
    "--silence-ms", default=500, show_default=True, type=click.IntRange(100), help="Server VAD silence."
)
@click.option(
    "--transport",
    type=click.Choice(["server", "contract"]),
    default="server",
    show_default=True,
    help="Through a real server and WebSocket, or straight into the model's VoiceStream.",
)
@click.option(
    "--part",
    type=click.Choice(["all", "turns", "recognisers", "cutoffs", "voices"]),
    default="all",
    show_default=True,
    help="Turns (latency, barge-in, stage speed), the recognisers' WER and RTF table, "
    "turn cut-offs (server_vad vs semantic_vad), each voice's time to first audio, local and "
    "remote (another livegen's /v1/audio/speech), or all but voices.",
)
@click.option(
    "--asr-models",
    default="",
    help="Comma-separated recognisers for the WER table [default: every one].",
)
def command(
    json_path: Path | None,
    rounds: int,
    barge_ins: int,
    silence_ms: int,
    transport: str,
    part: str,
    asr_models: str,
) -> None:
    """Benchmark the embedded voice cascade: stage speed, WER, turn latency, barge-in.

    Each question is spoken by espeak-ng (a voice unlike the assistant's) and
    fed at the pace of speech; turns with speculative answers run side by side
    with turns without them (the baseline).
    """
    from livegen.models.cascade import model as cascade

    click.echo("loading the cascade (Whisper, Piper worker)...", err=True)
    loaded = cascade.load()  # the server below gets this same instance: one per process
    loaded.use_llm(None, None)
    try:
        names = [name for name in asr_models.split(",") if name]
        report = _run_parts(loaded, part, names, transport, (rounds, barge_ins, silence_ms))
    finally:
        loaded.close()
    click.echo(render(report))
    if json_path is not None:
        json_path.write_text(json.dumps(asdict(report), indent=2))
        click.echo(f"wrote {json_path}")


def _run_parts(
    model: Any, part: str, names: list[str], transport: str, sizes: tuple[int, int, int]
) -> Report:
    from livegen.models.cascade import asr

    # The packaged recognisers by default; --asr-model-path's directory (LIVEGEN_ASR_MODEL_PATH) by name.
    names = names or list(asr.CHOICES)
    unknown = [name for name in names if name not in model.choices]
    if unknown:
        raise click.UsageError(f"unknown recognisers {unknown}; choose from {list(model.choices)}")
    rounds, barge_ins, silence_ms = sizes
    if part in ("cutoffs", "voices"):
        report = Report("none", {"cpus": os.cpu_count(), "load_average": list(os.getloadavg())}, {})
        if part == "cutoffs":
            report.turn_cutoffs = turn_cutoffs.measure(model)
        else:
            report.voices = voices.measure(model)
        report.machine["load_average_after"] = list(os.getloadavg())
        return report
    if part == "recognisers":
        report = Report("none", {"cpus": os.cpu_count(), "load_average": list(os.getloadavg())}, {})
    else:
        turns: Turns = ServerTurns(silence_ms) if transport == "server" else ContractTurns(model, silence_ms)
        try:
            report = asyncio.run(run(model, turns, rounds, barge_ins, silence_ms))
        finally:
            turns.close()
    if part != "turns":
        clips = recognisers.build_set(model)
        report.recognisers = recognisers.measure(model, clips, names)
    if part == "all":
        report.turn_cutoffs = turn_cutoffs.measure(model)
        report.machine["load_average_after"] = list(os.getloadavg())
    return report

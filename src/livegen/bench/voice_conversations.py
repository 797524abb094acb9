"""``livegen bench voice-conversations``: how many spoken conversations the embedded cascade holds at once.

For each level N, N conversations run at once against a real server serving
the cascade (``ServerTurns``: the same app as ``livegen serve``, on a loopback
port in this process), each its own Realtime session under server VAD. Each
conversation starts at its own moment (spread over ``--stagger`` seconds, as
independent users do), then asks ``--turns`` questions one after another:
the question is spoken by espeak-ng (a voice unlike the assistant's) at the
pace of speech, the microphone's silence follows until the answer is done,
and the user pauses 0.5-1.5 s before the next one. A turn's latency is from
the end of the user's speech to the first audio of the answer; a turn is
answered correctly when the answer's transcript contains the expected word.

Per level: turn latency p50/p95 (a turn with no answer counts as infinitely
late), the share answered correctly, and this process's CPU use (server and
clients together, in cores). The figure is ``max_conversations``: the largest
level whose p95 stays under ``--p95-goal-ms``.

``--asr-batch 1,8`` compares speech-recognition set-ups in one run (1: the
old path, one decode at a time; 8: batched across sessions, see
``models.cascade.asr_batch``); ``--vad onnx,ggml`` adds the last one again
with pysilero's ggml Silero instead of Silero on ONNX Runtime, the default.
Each level is measured with every set-up in turn, so that they see the same
load on a shared machine. Per level it also reports
where a turn's time went (the detector's stop and the transcript, from the
end of speech) and the recognition queue (p95 wait, mean batch size).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import random
import re
import statistics
import time
from pathlib import Path
from typing import Any

import click

from livegen.bench.voice_turns import _AUDIO_DELTAS, WIRE_RATE, ServerTurns, Utterance, synthesise
from livegen.models.cascade import vad
from livegen.models.cascade.asr_batch import BatchStats
from livegen.models.cascade.model import AsrSizing

#: Questions with one checkable answer, and the words that count as it.
QUESTIONS = (
    ("What is one hundred plus twenty five?", ("125", "twenty five")),
    ("Repeat after me, good morning everyone.", ("good morning",)),
    ("What is seven times six?", ("42", "forty two")),
    ("Repeat after me, the weather is lovely.", ("weather is lovely",)),
)
ANSWER_WAIT_S = 8.0
#: Pause between two measurements, so that answers still being spoken for the last do not load the next.
SETTLE_S = 3.0


def is_correct(answer: str, expected: tuple[str, ...]) -> bool:
    words = " ".join(re.findall(r"[a-z0-9]+", answer.lower()))
    return any(word in words for word in expected)


async def conversation(
    turns: ServerTurns,
    questions: list[tuple[Utterance, tuple[str, ...]]],
    num_turns: int,
    start_s: float,
    seed: int,
) -> list[dict[str, Any]]:
    """One user: waits ``start_s``, then asks ``num_turns`` questions, each after the last answer."""
    rng = random.Random(seed)
    await asyncio.sleep(start_s)
    records = []
    async with turns._call() as call:
        for index in range(num_turns):
            utterance, expected = questions[(seed + index) % len(questions)]
            mark = len(call.log)
            end = await call.feed(utterance.pcm24)
            silence = bytes(2 * int(ANSWER_WAIT_S * WIRE_RATE))

            def answered(mark: int = mark) -> object:
                return call.first("response.done", after=mark)

            await call.feed(silence, until=answered)
            created = [e for _, e in call.of("response.created", after=mark)]
            rid = created[0]["response"]["id"] if created else None
            first_audio = call.first(*_AUDIO_DELTAS, after=mark, response_id=rid) if rid else None
            stopped = call.first("input_audio_buffer.speech_stopped", after=mark)
            heard = call.first("conversation.item.input_audio_transcription.completed", after=mark)
            answer = "".join(
                str(e.get("delta", ""))
                for _, e in call.of("response.output_audio_transcript.delta", after=mark)
                if e.get("response_id") == rid
            )
            records.append(
                {
                    "question": utterance.text,
                    "heard": " ".join(
                        str(e.get("transcript", ""))
                        for _, e in call.of(
                            "conversation.item.input_audio_transcription.completed", after=mark
                        )
                    ),
                    "answer": answer,
                    "latency_ms": _since(end, first_audio),
                    # Where the turn's time went: the detector's stop, the transcript, the first audio.
                    "stopped_ms": _since(end, stopped),
                    "transcript_ms": _since(end, heard),
                    "correct": is_correct(answer, expected),
                }
            )
            await asyncio.sleep(rng.uniform(0.5, 1.5))
    return records


def _since(start: float, at: float | None) -> float | None:
    return None if at is None else (at - start) * 1000


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _stage(records: list[dict[str, Any]], key: str, q: float) -> float | None:
    values = [r[key] for r in records if r[key] is not None]
    return round(_percentile(values, q), 1) if values else None


async def level(
    turns: ServerTurns, questions: list[Any], num: int, num_turns: int, stagger_s: float, stats: BatchStats
) -> dict[str, Any]:
    stats.clear()
    cpu, wall = time.process_time(), time.perf_counter()
    starts = [stagger_s * i / max(1, num) for i in range(num)]
    runs = await asyncio.gather(
        *(conversation(turns, questions, num_turns, start, seed) for seed, start in enumerate(starts))
    )
    records = [record for run in runs for record in run]
    latencies = [math.inf if r["latency_ms"] is None else r["latency_ms"] for r in records]
    decodes = sum(size * count for size, count in stats.sizes.items())
    return {
        "conversations": num,
        "turns": len(records),
        "turn_p50_ms": round(statistics.median(latencies), 1),
        "turn_p95_ms": round(_percentile(latencies, 0.95), 1),
        "unanswered": sum(r["latency_ms"] is None for r in records),
        "correct_share": round(sum(r["correct"] for r in records) / len(records), 3),
        "cpu_cores": round((time.process_time() - cpu) / (time.perf_counter() - wall), 2),
        "machine_load": round(os.getloadavg()[0], 1),
        "stages_ms": {
            f"{key}_p{round(q * 100)}": _stage(records, f"{key}_ms", q)
            for key in ("stopped", "transcript")
            for q in (0.5, 0.95)
        },
        "asr": {
            "decodes": decodes,
            "mean_batch": round(decodes / max(1, sum(stats.sizes.values())), 2),
            "wait_p50_ms": round(1000 * _percentile(list(stats.waits), 0.5), 1) if stats.waits else None,
            "wait_p95_ms": round(1000 * _percentile(list(stats.waits), 0.95), 1) if stats.waits else None,
            "batch_p50_ms": round(1000 * statistics.median(stats.computes), 1) if stats.computes else None,
            "cancelled": stats.num_cancelled,
        },
        "examples": records[:2],
        "wrong": [r for r in records if not r["correct"]][:6],
    }


def max_conversations(rows: list[dict[str, Any]], p95_goal_ms: float) -> int:
    """The largest level whose turn p95 stays under the goal (0: none does)."""
    return max((row["conversations"] for row in rows if row["turn_p95_ms"] < p95_goal_ms), default=0)


def _detectors(vads: str) -> list[str]:
    names = [name.strip().lower() for name in vads.split(",") if name.strip()]
    if not names or any(name not in vad.BACKENDS for name in names):
        raise click.BadParameter(f"a comma list of {', '.join(vad.BACKENDS)}", param_hint="--vad")
    return names


def _sizings(batches: str, workers: int, threads: int) -> list[AsrSizing]:
    """The recognition set-ups to compare: batch 1 is the old path, others batch across sessions."""
    auto = AsrSizing.from_env()
    sizings = []
    for text in batches.split(","):
        batch = int(text)
        if batch == 1:
            sizings.append(AsrSizing(1, 1, threads or 2))
        else:
            count = workers or auto.workers
            sizings.append(AsrSizing(batch, count, threads or max(1, auto.threads * auto.workers // count)))
    return sizings


@click.command("voice-conversations")
@click.option(
    "--levels", default="1,4,8,12,16,24", show_default=True, help="Concurrent conversations to try."
)
@click.option("--turns", "num_turns", default=3, show_default=True, type=click.IntRange(1), help="Per user.")
@click.option(
    "--stagger", "stagger_s", default=3.0, show_default=True, help="Seconds the starts spread over."
)
@click.option("--silence-ms", default=500, show_default=True, help="Server VAD silence that ends a turn.")
@click.option("--p95-goal-ms", default=1000.0, show_default=True, help="Turn p95 a level must stay under.")
@click.option(
    "--asr-batch",
    "batches",
    default="1,8",
    show_default=True,
    help="Recognition set-ups to compare in one run, by most utterances a batch: 1 is the old path "
    "(one decode at a time, in arrival order, on 2 threads), 8 batches across sessions.",
)
@click.option(
    "--asr-workers", default=0, show_default=True, help="Batches decoded at once (0: one per core)."
)
@click.option("--asr-threads", default=0, show_default=True, help="Cores per decode (0: cores / workers).")
@click.option(
    "--vad",
    "vads",
    default="onnx",
    show_default=True,
    help="Voice activity detectors to compare (LIVEGEN_VAD): onnx, Silero v6 on ONNX Runtime (the "
    "server's default), or ggml, pysilero's. Every recognition set-up runs with the first; the last "
    "one also with each further detector.",
)
@click.option(
    "--workers",
    multiple=True,
    type=click.IntRange(1, 64),
    help="Compare servers of this many processes (repeatable: --workers 1 --workers 2), side by side in "
    "one run, each started as 'livegen serve --workers N' with its own recognition set-up (--asr-batch, "
    "--vad do not apply); adds the servers' CPU and memory (bench/voice_conversations_workers.py).",
)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the figures here."
)
def command(
    levels: str,
    num_turns: int,
    stagger_s: float,
    silence_ms: int,
    p95_goal_ms: float,
    batches: str,
    asr_workers: int,
    asr_threads: int,
    vads: str,
    workers: tuple[int, ...],
    json_path: Path | None,
) -> None:
    """Concurrent spoken conversations against the embedded cascade: turn p50/p95, correctness, CPU."""
    from livegen.models.cascade import model as cascade

    detectors = _detectors(vads)
    click.echo("loading the cascade and synthesising the questions...", err=True)
    loaded = cascade.load()  # the server below gets this same instance: one per process
    loaded.use_llm(None, None)
    questions = [(synthesise(loaded, text), expected) for text, expected in QUESTIONS]
    counts = [int(n) for n in levels.split(",") if n.strip()]
    if workers:
        from livegen.bench import voice_conversations_workers as compared

        loaded.close()  # the servers load their own; this one's threads would share their cores
        options = {"counts": counts, "num_turns": num_turns, "stagger_s": stagger_s}
        options |= {"silence_ms": silence_ms, "p95_goal_ms": p95_goal_ms}
        report = compared.compare(workers, questions, options)
        compared.print_report(report)
        if json_path is not None:
            json_path.write_text(json.dumps(report, indent=2))
        return
    turns = ServerTurns(silence_ms)
    runs: list[dict[str, Any]] = []
    chosen = os.environ.get("LIVEGEN_VAD")
    try:
        setups = [(sizing, detectors[0]) for sizing in _sizings(batches, asr_workers, asr_threads)]
        setups += [(setups[-1][0], detector) for detector in detectors[1:]]
        runs = [{"vad": name, "asr": dataclasses.asdict(sizing), "levels": []} for sizing, name in setups]
        # Level by level, every set-up in turn: on a shared machine the load changes over minutes,
        # and the set-ups compared at one level should see the same.
        for num in counts:
            for (sizing, detector), run in zip(setups, runs, strict=True):
                loaded.size_asr(sizing)
                os.environ["LIVEGEN_VAD"] = detector  # read by each session's detector when it opens
                click.echo(f"{num} conversations, recognition: {_describe(sizing)}, VAD {detector}", err=True)
                stats = loaded.stats.batches
                run["levels"].append(asyncio.run(level(turns, questions, num, num_turns, stagger_s, stats)))
                time.sleep(SETTLE_S)
        for run in runs:
            run["max_conversations"] = max_conversations(run["levels"], p95_goal_ms)
    finally:
        turns.close()
        loaded.close()
        if chosen is None:  # the choice was for this run's sessions, not for what runs after it
            os.environ.pop("LIVEGEN_VAD", None)
        else:
            os.environ["LIVEGEN_VAD"] = chosen
    report = {
        "benchmark": "voice-conversations",
        "machine": {"cpus": os.cpu_count(), "load_average": list(os.getloadavg())},
        "settings": {"turns": num_turns, "stagger_s": stagger_s, "silence_ms": silence_ms},
        "runs": runs,
        "p95_goal_ms": p95_goal_ms,
    }
    _print(report, p95_goal_ms)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2))


def _describe(sizing: AsrSizing) -> str:
    if sizing.is_serial:
        return f"one decode at a time on {sizing.threads} threads (the old path)"
    return f"batches of up to {sizing.batch}, {sizing.workers} workers x {sizing.threads} threads"


def _print(report: dict[str, Any], p95_goal_ms: float) -> None:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    for run in report["runs"]:
        click.echo(f"\nrecognition: {_describe(AsrSizing(**run['asr']))}, VAD {run['vad']}")
        click.echo(
            f"{'convs':>6}{'turns':>6}{'p50 ms':>8}{'p95 ms':>8}{'stop p50':>9}"
            f"{'heard p50':>10}{'heard p95':>10}{'correct':>8}{'cpu':>6}{'asr wait p95':>13}"
            f"{'batch':>6}{'load':>6}"
        )
        for row in run["levels"]:
            stages, asr = row["stages_ms"], row["asr"]
            click.echo(
                f"{row['conversations']:>6}{row['turns']:>6}{ms(row['turn_p50_ms']):>8}{ms(row['turn_p95_ms']):>8}"
                f"{ms(stages['stopped_p50']):>9}{ms(stages['transcript_p50']):>10}{ms(stages['transcript_p95']):>10}"
                f"{row['correct_share']:>8.2f}{row['cpu_cores']:>6.2f}{ms(asr['wait_p95_ms']):>13}{asr['mean_batch']:>6.1f}{row['machine_load']:>6.1f}"
            )
        click.echo(f"max conversations with turn p95 < {p95_goal_ms:.0f} ms: {run['max_conversations']}")
    figures = [run["max_conversations"] for run in report["runs"]]
    if len(figures) > 1 and figures[0]:
        click.echo(f"ratio, last set-up to first: {figures[-1] / figures[0]:.2f}")

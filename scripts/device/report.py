"""The device check's report: every stage's figures in ``device.json`` and as tables in ``device.md``.

``check.sh`` leaves, in its work directory, one JSON file per stage that finished (machine, duplex,
wan, checkpoint, serve) and ``stages.jsonl`` (each stage's exit status, seconds and whether its
budget ran out). A stage that failed or ran out of time is reported as such, with the end of its
log, and the other stages' figures are still written: a partial run on a lent machine is worth
keeping. The exit status is 1 when any stage that ran failed (or when none ran), so CI's dry run
fails on it.

    python scripts/device/report.py WORK OUT [--dry 1] [--wall-s S]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

STAGES = ("machine", "duplex", "wan", "checkpoint", "serve")
LOG_TAIL_LINES = 25


def collect(work: Path) -> dict[str, Any]:
    """The stages' statuses and figures, and the end of the logs of those that failed."""
    statuses = {}
    if (work / "stages.jsonl").is_file():
        for line in (work / "stages.jsonl").read_text().splitlines():
            if line.strip():
                status = json.loads(line)
                statuses[status.pop("stage")] = status
    results: dict[str, Any] = {"stages": statuses, "figures": {}, "logs": {}}
    for name in STAGES:
        path = work / f"{name}.json"
        if path.is_file():
            results["figures"][name] = json.loads(path.read_text())
        if name in statuses and (statuses[name]["rc"] != 0 or not path.is_file()):
            for log in (work / f"{name}.log", work / "server.log" if name == "serve" else None):
                if log is not None and log.is_file():
                    tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
                    results["logs"][log.stem] = "\n".join(tail)
    return results


def failed(results: dict[str, Any]) -> list[str]:
    """The stages that ran (DEVICE_STAGES may leave some out) and failed or left no figures."""
    statuses, figures = results["stages"], results["figures"]
    ran = [name for name in STAGES if name in statuses]
    return [name for name in ran if statuses[name]["rc"] != 0 or name not in figures]


def _machine(facts: dict[str, Any]) -> list[str]:
    gpu = facts.get("gpu") or {}
    where = f"{gpu['name']} ({gpu['memory_gib']} GiB)" if gpu else "no GPU (CPU)"
    return [
        f"Machine: {where}, {facts.get('cpus')} CPUs; {facts.get('platform')}.",
        f"Python {facts.get('python')}, torch {facts.get('torch')} (CUDA {facts.get('cuda')}), "
        f"transformers {facts.get('transformers')}, diffusers {facts.get('diffusers')}, "
        f"numpy {facts.get('numpy')}; livegen {facts.get('livegen_commit') or 'unknown commit'}.",
    ]


def _duplex(report: dict[str, Any]) -> list[str]:
    lines = [
        f"Lockstep frame clock: {report['model']} on {report['device']} ({report['dtype']}), "
        f"frame {report['frame_ms']:.0f} ms, {report['steps']} timed steps per batch; held "
        f"(p95 under the frame): **{report['sessions_held']}** sessions; first audio "
        f"{report['first_audio']['first_audio_ms']} ms.",
        "",
        "| sessions | step p50 ms | p95 ms | p99 ms | max ms | missed frames | GPU GiB | held |",
        "|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for row in report["sizes"]:
        gpu = "-" if row.get("gpu_memory_gib") is None else row["gpu_memory_gib"]
        lines.append(
            f"| {row['sessions']} | {row['step_ms_p50']} | {row['step_ms_p95']} | {row.get('step_ms_p99')} "
            f"| {row['step_ms_max']} | {row['frames_over_period']}/{report['steps']} | {gpu} "
            f"| {'yes' if row['held'] else 'no'} |"
        )
    return lines


def _wan(report: dict[str, Any]) -> list[str]:
    lines = [
        f"Causal Wan, {report['geometry']} geometry, random weights, on {report['device']} "
        f"({report['dtype']}): first chunk {report['first_chunk_ms']} ms alone; "
        f"{report['frames_per_chunk']} frames a chunk, the stream plays at {report['fps']:.0f} fps.",
        "",
        "| sessions batched | fps per session | ms per frame |",
        "|---:|---:|---:|",
    ]
    for row in report["sessions"]:
        lines.append(f"| {row['sessions']} | {row['fps_per_session']} | {row['ms_per_frame']} |")
    return lines


def _serve(report: dict[str, Any], checkpoint: dict[str, Any] | None) -> list[str]:
    made = ""
    if checkpoint:
        made = (f" on a random {checkpoint['geometry']} checkpoint ({checkpoint['bytes'] / 1024**3:.2f} GiB "
                f"{checkpoint['dtype']}, written in {checkpoint['save_s']} s)")  # fmt: skip
    cpu = report.get("server_cpu_share")
    return [
        f"Live `livegen serve --voice-model moshi`{made}: {report['sessions']} WebSocket clients streaming "
        f"real-time audio for {report['seconds']:.0f} s.",
        "",
        "| clients | with audio | first audio p50 ms | max ms | audio s per client (min) "
        "| missed frames | step ms | server CPU | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| {report['sessions']} | {report['sessions_with_audio']} | {report['first_audio_ms_p50']} "
        f"| {report['first_audio_ms_max']} | {report['audio_s_per_session_min']} | {report['missed_frames']} "
        f"| {report.get('step_ms')} | {'-' if cpu is None else f'{100 * cpu:.0f}% of a core'} "
        f"| {', '.join(report['errors']) or 'none'} |",
    ]


def markdown(results: dict[str, Any], dry: bool, wall_s: int | None) -> str:
    figures, statuses = results["figures"], results["stages"]
    mode = "DEVICE_DRY=1 (tiny geometry on the CPU: the code paths, not the figures)" if dry else "full size"
    lines = [f"# Device check ({mode})", ""]
    if "machine" in figures:
        lines += [*_machine(figures["machine"]), ""]
    sections = (("duplex", _duplex), ("wan", _wan))
    for name, render in sections:
        if name in figures:
            lines += [f"## {name}", "", *render(figures[name]), ""]
    if "serve" in figures:
        lines += ["## serve", "", *_serve(figures["serve"], figures.get("checkpoint")), ""]
    lines += ["## stages", "", "| stage | exit | seconds | budget s |", "|---|---:|---:|---:|"]
    for name in STAGES:
        status = statuses.get(name)
        if status is None:
            lines.append(f"| {name} | not run | - | - |")
            continue
        verdict = "timed out" if status["timed_out"] else str(status["rc"])
        lines.append(f"| {name} | {verdict} | {status['seconds']} | {status['budget_s']} |")
    if wall_s is not None:
        lines += ["", f"Wall time: {wall_s} s."]
    for name, tail in results["logs"].items():
        lines += ["", f"### {name}.log (last lines)", "", "```", tail, "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--dry", default="0")
    parser.add_argument("--wall-s", type=int, default=None)
    args = parser.parse_args(argv)
    results = collect(args.work)
    dry = args.dry == "1"
    results["dry"], results["wall_s"], results["failed"] = dry, args.wall_s, failed(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "device.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "device.md").write_text(markdown(results, dry, args.wall_s))
    print(markdown(results, dry, args.wall_s))
    if results["failed"] or not results["stages"]:
        print(f"report: failed stages: {', '.join(results['failed'])}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""docs/compatibility.md from the conformance suite's results: client x capability.

``tests/conformance/conftest.py`` records the outcome of every test marked
``@pytest.mark.conformance(client=..., capability=...)`` into a JSON file
(``out/conformance.json``); this module turns that file into the Markdown
matrix, so the published table is what the clients did in a real run, never
written by hand. It imports nothing from livegen or pytest::

    python -m tests.conformance.matrix --json out/conformance.json --out docs/compatibility.md
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The columns, in order; a capability no client was tested for is left out.
CAPABILITIES: dict[str, str] = {
    "spoken-turn": "a spoken turn ended by server VAD: transcript and spoken answer",
    "barge-in": "speech over a playing answer cancels and truncates it",
    "text-turn": "a text message and a response to it",
    "unknown-item": "retrieve / delete of an unknown item id: OpenAI's error, the session goes on",
    "idle-cancel": "response.cancel with nothing running: OpenAI's error, which the client ignores",
    "resume": "a dropped connection resumed with the client's own resume",
    "tls": "the client over wss:// to `livegen serve --ssl-certfile/--ssl-keyfile`",
    "transcription-session": "`session.type: transcription`: live transcription deltas, no responses",
    "audio-transcriptions": "`POST /v1/audio/transcriptions`: json, verbose_json, text, streamed events",
    "audio-speech": "`POST /v1/audio/speech`: streamed speech; unknown model or voice refused by name",
    "reasoning": "`reasoning.effort` reaches the language model; its thinking never reaches the client",
    "image-input": "an `input_image` in a user message reaches a vision chat endpoint as an image part",
    "transcription-keywords": "`audio.input.transcription.keywords` steer the recogniser",
    "preambles": "a slow answer is preceded by a spoken `phase: commentary` item, then `final_answer`",
    "mcp-tools": "`{type: mcp}` tools: listed, called by the server, approved, failures contained",
    "translation-session": "`client.realtime.translations`: speech recognised, translated, spoken",
    "live-appends": "GPT-Live: instructions, thinking, commentary appends acknowledged; commentary spoken",
    "live-mute": "GPT-Live: input muted (the model hears silence) and unmuted, each acknowledged",
    "live-close": "GPT-Live: `session.close` ends with `session.closed`; a later event is refused",
    "live-errors": "GPT-Live: unknown field, append over the bound, malformed message: OpenAI's error",
    "live-keys": "GPT-Live: an ephemeral key opens a session; a wrong key is refused",
    "live-lockstep": "GPT-Live over a lockstep model (moshi-tiny): it speaks; what it cannot do is refused",
    "live-usage": "GPT-Live: usage in whole seconds; `usage_ratio` from the language model's token counts",
}

#: Worst first: a cell shows the worst outcome of its tests.
_RANK = {"fail": 0, "skip": 1, "pass": 2, "n/a": 3}


@dataclass
class Cell:
    outcome: str
    notes: list[str]


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def cells(results: Iterable[dict[str, Any]]) -> dict[tuple[str, str], Cell]:
    """One cell per (client, capability): the worst outcome of its tests, with their reasons."""
    table: dict[tuple[str, str], Cell] = {}
    for result in results:
        key = (result["client"], result["capability"])
        outcome, reason = result["outcome"], result.get("reason") or ""
        cell = table.setdefault(key, Cell(outcome, []))
        if _RANK[outcome] < _RANK[cell.outcome]:
            cell.outcome = outcome
        if reason and outcome != "pass":
            note = f"{reason[:240]} ({result['test']})" if outcome == "fail" else reason
            if note not in cell.notes:
                cell.notes.append(note)
    return table


def render(data: dict[str, Any]) -> str:
    results = data["results"]
    table = cells(results)
    clients = list(dict.fromkeys(r["client"] for r in results))
    columns = [c for c in CAPABILITIES if any(key[1] == c for key in table)]
    columns += sorted({key[1] for key in table} - set(columns))
    notes: list[str] = []
    lines = [
        "| client | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for client in clients:
        row = []
        for capability in columns:
            cell = table.get((client, capability))
            if cell is None:
                row.append("not tested")
                continue
            label = {"pass": "pass", "fail": "**FAIL**", "skip": "skipped", "n/a": "n/a"}[cell.outcome]
            for note in cell.notes:
                notes.append(f"{client}, {capability}: {note}")
                label += f" [{len(notes)}]"
            row.append(label)
        lines.append(f"| {client} | " + " | ".join(row) + " |")
    modules: dict[str, list[str]] = {}
    for result in results:
        module = f"`{result['test'].split('::')[0]}`"
        if module not in modules.setdefault(result["client"], []):
            modules[result["client"]].append(module)
    passed = sum(1 for cell in table.values() if cell.outcome == "pass")
    out = [
        "# Compatibility",
        "",
        "Real third-party Realtime clients, unchanged and with their default settings except",
        "the URL and the key, against a real `livegen` server serving its embedded voice",
        "model. Generated by `tests/conformance/matrix.py` from the results of the conformance",
        "suite (`tests/conformance/`); do not edit by hand.",
        "",
        f"- run: {data['date']}, `{data['command']}`, livegen {data.get('livegen', 'unknown')}",
        f"- cells passing: {passed} of {len(table)}",
        "",
        *lines,
        "",
        "Clients (each pinned; its test module says how it is driven):",
        "",
        *[f"- {client}: {', '.join(modules[client])}" for client in clients],
        "",
        "Capabilities:",
        "",
        *[f"- **{name}**: {CAPABILITIES[name]}" for name in columns if name in CAPABILITIES],
    ]
    if notes:
        out += ["", "Notes:", "", *[f"{i}. {note}" for i, note in enumerate(notes, 1)]]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", type=Path, default=Path("out/conformance.json"))
    parser.add_argument("--out", type=Path, default=Path("docs/compatibility.md"))
    arguments = parser.parse_args(argv)
    arguments.out.write_text(render(load(arguments.json)))
    print(f"wrote {arguments.out}")


if __name__ == "__main__":
    main()

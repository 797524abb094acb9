"""The language model's worker process: llama.cpp's OpenAI-compatible server on loopback.

``python -m livegen.models.llm.worker '{json options}'`` loads one GGUF with xllamacpp, starts
llama.cpp's own HTTP server on ``127.0.0.1:port`` (chat completions, streaming, ``tools``
parsed by the model's jinja chat template, a prompt cache per slot), prints one JSON line
``{"ready": url}`` on stdout, and serves until its stdin closes: the parent's end, or the
parent's death, so a worker never outlives the server that started it.

A process of its own because decoding holds a core for seconds: on the server's event loop it
would stall every session, and in a thread it would share the GIL-bound process's memory and
fate (a crash in llama.cpp kills only this process; ``service`` restarts it). OpenMP is told not
to spin (``OMP_WAIT_POLICY=PASSIVE``, set before xllamacpp loads): two spinning threads on a
shared two-core machine decoded ten times slower than one.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def serve(options: dict[str, Any]) -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = options["model"]
    params.model_alias = options.get("alias", "")
    params.n_ctx = int(options["context"]) * int(options["parallel"])  # llama.cpp splits it per slot
    params.n_parallel = int(options["parallel"])
    params.cpuparams.n_threads = int(options["threads"])
    params.cpuparams_batch.n_threads = int(options["threads"])
    params.use_jinja = True  # the model's own template: Qwen's <tool_call> comes back as tool_calls
    params.cache_prompt = True
    params.hostnames = ["127.0.0.1"]
    params.port = int(options.get("port", 0))
    params.verbosity = -1
    server = xllamacpp.Server(params)
    print(json.dumps({"ready": server.listening_address}), flush=True)
    sys.stdin.read()  # until the parent closes it, or dies
    del server


def main() -> None:
    serve(json.loads(sys.argv[1]))


if __name__ == "__main__":
    main()

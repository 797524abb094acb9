"""``VoiceModels``: the voice models a server has loaded, and what a session needs of one.

A voice model is loaded once per process, on the server's start (the default)
or on the first session that asks for another, then shared by every session;
``--llm-base-url`` configures it through the ``RemoteLLM`` contract and the
server's remote speech stages (``--asr-base-url``, ``--tts-base-url``) through
``RemoteSpeech``; a loader that takes typed settings gets the cascade's
(``--vad``, ``--asr-workers``...: ``CascadeSettings``, read off the server's
settings by name). In a server process of a cluster the engine is handed the
cluster's services (``cluster/services.py`` chooses them, once): a lockstep
model's clock (``SharedLockstep``) and the cascade's heavy parts
(``models.voice.SharedSpeech``, given to the loader); this module never asks
whether it is in one. The cache is the engine's, kept in a module of its own so
that the engine holds sessions and the cache holds models: a session's parts
(``ModelFacts``, a stream) come from here, on its opening and on a
``session.update`` that switches model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from livegen.errors import ConfigError
from livegen.models import Kind, Registry
from livegen.models.cascade.settings import CascadeSettings
from livegen.models.lockstep import LockstepModel
from livegen.models.registry import ModelInfo, ServedNames
from livegen.models.voice import (
    OPENAI_TRANSCRIPTION_MODELS,
    ClipAudio,
    LLMLimits,
    RemoteLLM,
    RemoteSpeech,
    SharedSpeech,
    SpeechStack,
    StreamConfig,
    VoiceModel,
    VoiceStream,
)
from livegen.protocol import errors as wire_errors
from livegen.runtime.voice.lockstep import Clock, FrameClock
from livegen.runtime.voice.lockstep_voice import LockstepVoice
from livegen.voice.session import ModelFacts
from livegen.voice.settings import REALTIME_VOICES


class ModelSettings(Protocol):
    """What the cache reads of the server's settings (``server.config.ServerConfig``)."""

    @property
    def llm_base_url(self) -> str | None: ...
    @property
    def llm_model(self) -> str | None: ...
    @property
    def llm_api_key(self) -> str | None: ...
    @property
    def llm_context_tokens(self) -> int | None: ...
    def llm_limits(self) -> LLMLimits: ...
    def speech_stack(self) -> SpeechStack: ...
    def voice_options(self) -> Mapping[str, str]: ...
    @property
    def duplex_yield_ms(self) -> float: ...
    @property
    def duplex_realtime_headroom(self) -> float: ...


class SharedLockstep(Protocol):
    """A cluster's lockstep service (``cluster/lockstep.py``): a lockstep model loaded once for
    every server process, and its one frame clock."""

    async def connect(self, entry: ModelInfo, options: Mapping[str, str] | None, headroom: float) -> Clock:
        """This process's face of the model's clock, the service waited for until loaded."""
        ...


@dataclass(frozen=True)
class SharedModels:
    """The cluster's model services a server process's voice models use (``cluster/services.py``
    chooses them); None each: that model runs in this process."""

    lockstep: SharedLockstep | None = None
    speech: SharedSpeech | None = None


class VoiceModels:
    def __init__(
        self,
        registry: Registry,
        names: ServedNames,
        settings: ModelSettings,
        shared: SharedModels | None = None,
    ) -> None:
        self.registry = registry
        self.shared = shared or SharedModels()
        #: Requested model names -> the model that answers (``--served-model-name``, ``--model-alias``).
        self.names = names
        self.settings = settings
        #: Loaded models by their registry name.
        self.loaded: dict[str, VoiceModel] = {}
        self._load_lock = asyncio.Lock()

    async def get(self, name: str) -> VoiceModel:
        """The voice model ``name`` answers to, loaded once per process."""
        entry = self.registry.get(self.names.resolve(name))
        if entry.kind is not Kind.VOICE:
            raise ConfigError(f"model {name!r} is a {entry.kind} model, not a voice model")
        if entry.name not in self.loaded:
            async with self._load_lock:
                if entry.name not in self.loaded:
                    # The weights options (--voice-model-path...) are the served model's only.
                    options = self.settings.voice_options() if entry.name == self.names.default else None
                    self.loaded[entry.name] = self._configured(entry.name, await self._load(entry, options))
        return self.loaded[entry.name]

    async def _load(self, entry: ModelInfo, options: Mapping[str, str] | None) -> Any:
        settings = CascadeSettings.of(self.settings)  # a bad one fails the load, by flag
        if entry.lockstep and self.shared.lockstep is not None:  # once per cluster, in its service
            headroom = self.settings.duplex_realtime_headroom
            return self._lockstep(entry.name, await self.shared.lockstep.connect(entry, options, headroom))
        load = self.registry.load
        return await asyncio.to_thread(load, entry.name, options, settings, speech=self.shared.speech)

    def _configured(self, name: str, model: Any) -> VoiceModel:
        settings = self.settings
        if isinstance(model, LockstepModel):  # served at its frame clock, batched
            model = self._lockstep(name, FrameClock(model, headroom=settings.duplex_realtime_headroom))
        if settings.llm_base_url and isinstance(model, RemoteLLM):
            model.use_llm(
                settings.llm_base_url,
                settings.llm_model,
                settings.llm_api_key,
                context_tokens=settings.llm_context_tokens,
                limits=settings.llm_limits(),
            )
        stack = settings.speech_stack()
        if stack.is_remote and isinstance(model, RemoteSpeech):  # this server's sessions only
            model = model.with_speech(stack)
        return model  # type: ignore[no-any-return]

    def _lockstep(self, name: str, clock: Clock) -> LockstepVoice:
        """A lockstep model as a voice model at its frame clock: its own (``runtime/voice/lockstep.py``)
        or, in a cluster, the cluster's (``cluster/lockstep.py``)."""
        yield_frames = round(self.settings.duplex_yield_ms / clock.model.spec.frame_ms)
        return LockstepVoice(name, clock.model, clock, yield_frames)

    def facts(self, name: str, model: VoiceModel) -> ModelFacts:
        """What a session's core knows of its model: rates, whether it detects speech, its voices,
        and a lockstep model's frame period."""
        frame_ms = model.frame_ms if isinstance(model, LockstepVoice) else 0.0
        return ModelFacts(
            name,
            model.input_rate,
            model.output_rate,
            model.has_vad,
            accepts_voice=self._voices(model),
            transcription_models=self._transcription_models(model),
            frame_ms=frame_ms,
        )

    async def open_stream(
        self, session_id: str, name: str, config: StreamConfig
    ) -> tuple[ModelFacts, VoiceStream]:
        """Another model's stream for a session (``session.update`` with a new model)."""
        try:
            model = await self.get(name)
        except ConfigError:
            raise wire_errors.MODEL_NOT_FOUND.error(model=name, param="session.model") from None
        try:
            stream = await model.open(session_id, config)
        except Exception as exc:
            failed = wire_errors.MODEL_OPEN_FAILED
            raise failed.error(model=name, detail=exc, param="session.model") from exc
        return self.facts(name, model), stream

    def _voices(self, model: VoiceModel) -> Callable[[str], bool] | None:
        """Which voice names a session may pick: OpenAI's and the model's own; None (any) when the
        model does not say, or a remote voice (``--tts-base-url``) speaks and decides."""
        if self.settings.speech_stack().tts_base_url or not isinstance(model, ClipAudio):
            return None
        clips = model

        def accepts(voice: str) -> bool:
            return voice in REALTIME_VOICES or clips.accepts_voice(voice)

        return accepts

    def _transcription_models(self, model: VoiceModel) -> tuple[str, ...] | None:
        """Which transcription model names a session may give: the model's recognisers and
        OpenAI's names; None (any) when a remote recogniser (``--asr-base-url``) hears, or the
        model does not say."""
        if self.settings.speech_stack().asr_base_url or not isinstance(model, ClipAudio):
            return None
        return (*model.transcription_models, *OPENAI_TRANSCRIPTION_MODELS)

    async def close(self) -> None:
        """Stop the frame clocks and close this server's remote stages' connections (the models
        themselves stay loaded)."""
        for model in self.loaded.values():
            if isinstance(model, LockstepVoice):
                await model.close()
            if self.settings.speech_stack().is_remote and isinstance(model, RemoteSpeech):
                await model.close_speech()

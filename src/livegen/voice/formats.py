"""The audio formats of a voice session's ``session.update``: GA objects, beta names, sample rates.

``config.py`` applies an update field by field; this module owns its audio
formats, the part with the most spellings: GA's ``audio.input.format`` object
(``type`` and ``rate``), beta's ``input_audio_format`` name, and vllm-omni's
``sample_rate_hz`` (on the session for input, under ``audio.input`` and
``audio.output``), which must agree with each other and with a GA object's
explicit rate. A link that fixes the formats (a WebRTC call's track) refuses a
change (``formats_fixed``). It reads the current formats through ``Formats``,
the narrow view of the configuration it needs, so it never imports
``config.py``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from msgspec import UNSET, UnsetType

from livegen.protocol.audio import (
    DEFAULT_PCM_RATE,
    MAX_RATE,
    MIN_RATE,
    AudioFormat,
    Encoding,
    format_of,
    parse_format,
)
from livegen.protocol.errors import AUDIO_FORMAT_FIXED, INVALID_VALUE
from livegen.protocol.realtime.fields import AudioFormatShape, AudioInputShape, AudioOutputShape, SessionShape


class Formats(Protocol):
    """The configuration's formats, and whether its link fixes them."""

    @property
    def input_format(self) -> AudioFormat: ...

    @property
    def output_format(self) -> AudioFormat: ...

    @property
    def formats_fixed(self) -> bool: ...


def format_updates(
    current: Formats, session: SessionShape, audio_in: AudioInputShape, audio_out: AudioOutputShape
) -> dict[str, Any]:
    """The audio formats an update names (GA or beta), with any ``sample_rate_hz`` applied:
    ``input_format`` and ``output_format``, where named."""
    updates: dict[str, Any] = {}
    for name, named in (
        (
            "input_format",
            (
                ("session.audio.input.format", audio_in.format),
                ("session.input_audio_format", session.input_audio_format),
            ),
        ),
        (
            "output_format",
            (
                ("session.audio.output.format", audio_out.format),
                ("session.output_audio_format", session.output_audio_format),
            ),
        ),
    ):
        for param, value in named:
            if (fmt := _format(value, param)) is not None:
                updates[name] = fmt
                _check_fixed(current, name, fmt, param)
    input_rates = (
        ("session.sample_rate_hz", session.sample_rate_hz),
        ("session.audio.input.sample_rate_hz", audio_in.sample_rate_hz),
    )
    output_rates = (("session.audio.output.sample_rate_hz", audio_out.sample_rate_hz),)
    for name, sources, explicit in (
        ("input_format", input_rates, audio_in.format),
        ("output_format", output_rates, audio_out.format),
    ):
        rate = _sample_rate(sources, explicit)
        if rate is not None:
            fmt = updates.get(name, getattr(current, name))
            param = next(p for p, value in sources if value is not UNSET)
            updates[name] = _with_rate(fmt, rate, param)
            _check_fixed(current, name, updates[name], param)
    return updates


def _check_fixed(current: Formats, name: str, fmt: AudioFormat, param: str) -> None:
    """Refuse a format change the session's transport cannot honour (``Config.formats_fixed``)."""
    fixed: AudioFormat = getattr(current, name)
    if current.formats_fixed and fmt != fixed:
        raise AUDIO_FORMAT_FIXED.error(
            field=param, fixed=format_words(fixed), asked=format_words(fmt), param=param
        )


def format_words(fmt: AudioFormat) -> str:
    return f"{fmt.encoding.value} at {fmt.rate} Hz"


def _format(value: AudioFormatShape | str | UnsetType | None, param: str) -> AudioFormat | None:
    """A GA format object or a beta name (None where neither is given); a GA object's absent
    type is PCM, its absent rate 24 kHz."""
    if value is UNSET or value is None:
        return None
    if isinstance(value, str):
        return parse_format(value, param)
    kind = Encoding.PCM.value if value.type is UNSET else value.type
    return format_of(kind, DEFAULT_PCM_RATE if value.rate is UNSET else value.rate, param)


def _sample_rate(sources: tuple[tuple[str, Any], ...], explicit: object) -> int | None:
    """The ``sample_rate_hz`` named by any of ``sources`` (they must agree, also with a GA format
    object's explicit ``rate``), or None."""
    rates: dict[str, Any] = {param: rate for param, rate in sources if rate is not UNSET}
    if isinstance(explicit, AudioFormatShape) and explicit.rate is not UNSET and rates:
        rates["format.rate"] = explicit.rate
    for param, rate in rates.items():
        if not isinstance(rate, int) or isinstance(rate, bool) or not MIN_RATE <= rate <= MAX_RATE:
            detail = f"{param} must be an integer from {MIN_RATE} to {MAX_RATE} Hz, got {rate!r}"
            raise INVALID_VALUE.error(detail=detail, param=param)
    if len(set(rates.values())) > 1:
        raise INVALID_VALUE.error(detail=f"the sample rates named disagree: {rates}", param=next(iter(rates)))
    return next(iter(rates.values()), None)


def _with_rate(fmt: AudioFormat, rate: int, param: str) -> AudioFormat:
    if fmt.encoding is Encoding.PCM:
        return replace(fmt, rate=rate)
    if rate != fmt.rate:
        detail = f"{param} is {rate} Hz, but {fmt.encoding.value} is always {fmt.rate} Hz"
        raise INVALID_VALUE.error(detail=detail, param=param)
    return fmt

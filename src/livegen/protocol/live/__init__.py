"""OpenAI's GPT-Live API (``/v1/live/sessions``) as one more dialect of the voice wire.

- ``events.py``: every client and server event livegen takes or sends, typed (msgspec);
- ``dialect.py``: the client's events as a voice session's (GA Realtime) ones, and back;
- ``timeline.py``: the output audio as a gapless real-time stream with its transcript on it.
"""

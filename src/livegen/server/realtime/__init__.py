"""The voice WebSockets: OpenAI Realtime (``/v1/realtime``), GPT-Live (``/v1/live``), resumes
and translation sessions, each a thin transport over the voice session core."""

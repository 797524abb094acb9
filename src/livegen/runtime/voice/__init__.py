"""The voice runtime: the engine that owns every voice session, and the runner that drives one.

``engine.VoiceEngine`` caches models, admits sessions and carries each through
its lifecycle (attached -> parked -> attached or ended); ``runner.Runner`` is a
session's single writer; ``attachment`` numbers and journals what a session
sends, for resuming; ``mailbox`` is the runner's single-consumer queue.
"""

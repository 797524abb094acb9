"""The voice runtime: the engine that admits voice sessions, and the tasks that run each one.

``engine.VoiceEngine`` caches models, admits sessions and makes their parts;
``owner.SessionOwner`` runs one session's lifecycle by the table in
``voice/lifecycle.py`` (open, live, parked, resumed, ended), with ``parking``
(the parked budget), ``handoff`` (a resume's take-over) and ``inbound`` (client
events to the runner); ``runner.Runner`` is a session's single writer;
``attachment`` numbers and journals what a session sends, for resuming;
``mailbox`` is the runner's single-consumer queue.
"""

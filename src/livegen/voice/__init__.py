"""The voice session core: a sans-IO state machine for one Realtime session.

No asyncio, no clock, no randomness: time comes in as ``now`` arguments and
ids from an injected factory; effects (events to send, model calls to make)
come out as values for ``runtime/`` to perform.
"""

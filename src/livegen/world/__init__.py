"""The world session core: a sans-IO state machine for AR-diffusion world sessions.

No asyncio, no clock, no randomness: events are accepted, ticks are planned,
committed or failed as pure state transitions; ``runtime/`` performs them.
"""

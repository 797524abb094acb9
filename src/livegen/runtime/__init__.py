"""The asyncio runtime: the only layer that awaits models, one engine per kind of session.

``voice/`` and ``world/`` each hold their kind's engine (what the server's
transports hand sessions to) and what it drives: one task per session calls
that session's core (the single writer); the world scheduler batches due
sessions into one model step; pools bound memory.
"""

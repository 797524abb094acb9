"""The asyncio runtime: the only layer that awaits models.

One task per session drives that session's core (the single writer); the world
scheduler batches due sessions into one model step; pools bound memory.
"""

"""The world runtime: the engine that owns the world model and every world session.

``engine.WorldEngine`` builds the scheduler, the session manager and the
workers (in this process, or Ray actors); ``owner`` serves one socket's
session (dispatch, open and close, metrics); ``scheduler`` batches due sessions
into one model step; ``runner`` paces one session, and its ``sender`` writes that
session's output to the client, bounded; ``kv_pool`` bounds
KV memory; ``workers`` runs the model (``cluster/world_actors.py``: in Ray actors).
"""

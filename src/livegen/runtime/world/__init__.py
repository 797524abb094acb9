"""The world runtime: the engine that owns the world model and every world session.

``engine.WorldEngine`` builds the scheduler, the session manager and the
workers (in this process, or Ray actors); ``owner`` serves one socket's
session (dispatch, open and close, metrics); ``scheduler`` batches due sessions
into one model step; ``runner`` drives one session's output; ``kv_pool`` bounds
KV memory; ``workers`` runs the model (``cluster/world_actors.py``: in Ray actors).
"""

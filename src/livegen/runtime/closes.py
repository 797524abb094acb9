"""WebSocket close codes with which the runtime ends a session, shared by both kinds.

They live here, not in ``server/``, because the engines decide them (a session
whose client stopped reading); ``server/http/budgets.py`` re-exports them beside its
own connection-level codes.
"""

#: Close code of a connection whose unsent bytes passed ``--max-unsent-bytes`` (a client not reading).
CLOSE_NOT_READING = 4002
NOT_READING_REASON = "unsent bytes over budget: the client is not reading"

"""The HTTP edge of the server: API keys, body and head limits, connection budgets, browser
origins, and the ephemeral client keys it checks."""

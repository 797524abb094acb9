"""The embedded language model: Qwen2.5-Coder-1.5B-Instruct (or SmolLM2-135M, a test fixture) run
by xllamacpp in a worker process of its own, served as an OpenAI-compatible chat endpoint on
loopback, so the cascade reaches it through the same client as ``--llm-base-url``.

``weights`` finds and joins the packaged weights, ``worker`` is the process that runs them,
``service`` starts, watches and restarts it, ``prompt`` is what the assistant is told it is.
Importing this package imports nothing heavy.
"""

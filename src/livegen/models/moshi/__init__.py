"""``moshi`` and ``moshi-tiny``: a native full-duplex voice model served in lockstep (issue 25).

Built on the stock ``transformers`` classes (``MoshiForConditionalGeneration`` with its
``MimiModel`` codec), no vendored repository. livegen adds what serving many sessions in one step
needs: a per-slot ring KV cache at each session's own positions (``cache.py``), Mimi streamed per
slot (``codec.py``), and the batched step with per-session sampling (``model.py``), behind the
lockstep contract of ``models/lockstep.py``. ``loader.py`` builds the tiny random configuration or
the 7B geometry; ``weights.py`` loads real weights from a local directory, checked by sha256.
"""

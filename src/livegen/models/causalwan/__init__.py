"""``causal-wan``: block-causal Wan 2.1 (the Self-Forcing family) served on livegen's paged KV.

Built on the stock ``diffusers`` classes (``WanTransformer3DModel``,
``AutoencoderKLWan``, ``FlowMatchEulerDiscreteScheduler``) and ``transformers``'
umT5; livegen adds what diffusers lacks: attention processors that read a
session's cached context K/V and write a chunk's K/V only from its final clean
pass (``attention.py``), RoPE offset by frame index, the prompt's
cross-attention K/V cached per prompt, the VAE's causal decoder state per
session (``vae.py``), control conditioning (``controls.py``) and the batched
step over sessions (``model.py``). ``loader.py`` builds the tiny random
configuration or loads weights from a local directory.
"""

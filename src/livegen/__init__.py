"""livegen: a realtime session engine for streaming generative models.

Layers, one way: bytes -> ``protocol`` -> session cores (``voice``, ``world``)
-> effects -> ``runtime`` -> ``models`` -> outputs -> cores -> ``protocol`` ->
bytes. ``server`` mounts the endpoints, ``client`` talks to them, ``bench``
measures them. See docs/architecture.md.
"""

__version__ = "0.1.0"

"""The room game and its exact world model, ``procedural-world``.

``game.py`` holds the rules and the renderer (pure functions over a frozen
state); ``procedural.py`` serves them behind the world-model contract. The
neural ``tiny-world`` (``models/tinyworld/``) is a model of this same game and
shares its spec, so both import from here. Nothing is imported eagerly: the
catalog names the loader by path.
"""

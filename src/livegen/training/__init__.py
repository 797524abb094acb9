"""Training code, kept apart from serving: nothing that serves imports this package.

``tinyworld/`` trains the embedded ``tiny-world`` model (``livegen
train-world``) on clips of the room game and exports the weights that
``models/tinyworld/`` ships. It imports the served model's modules (the net,
the sampler, the vocabulary, the weights check), never the reverse, so a
change here cannot break serving.
"""

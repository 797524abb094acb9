"""``tiny-world``, the embedded neural world model of the room game, as served.

``net.py`` is the network, ``vocab.py`` its action and theme rows,
``sampling.py`` the flow sampler and a plain rollout, ``model.py`` the
world-model contract (batched steps over KV pages), ``weights.py`` loads and
checks the checkpoint shipped in ``shipped/``. Training it is
``livegen.training.tinyworld``'s job, which imports these modules; nothing
here imports training. Nothing is imported eagerly: the catalog names
``model:load`` by path, so listing models never imports torch.
"""

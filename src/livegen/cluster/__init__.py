"""Scale-out: everything that runs livegen over many processes, and the one place Ray is imported.

A server of one process, its models in-process, never imports this package's
Ray parts. ``livegen serve --workers N`` (or ``--ray-address``) runs many; what
they need lives here:

- ``supervisor``: the parent of the server processes (Ray's start or join,
  restarts, the drain's signals), and each child's start (``python -m
  livegen.cluster.supervisor``);
- ``coordinator``: the cluster's one coordinator actor (process tags, the
  server-wide counts, who owns a session) and the stop of its services;
- ``gate`` and ``forward``: the ASGI middleware that admits, counts and drains
  sessions, and relays a resume to the process that owns it;
- the model services, each loaded once per cluster in named Ray actors:
  ``speech`` (the cascade's recogniser, speech workers and end-of-turn model),
  ``lockstep`` (a lockstep model's one frame clock), ``world`` (the world
  model's shared hosts) and ``world_actors`` (``--world-workers``' actors);
- ``ray``: the one ``import_ray()``; ``mode``: the one switch that says whether
  this process is a server of a cluster (``LIVEGEN_CLUSTER``).

``tests/test_layers.py`` holds that no module outside this package imports Ray.
"""

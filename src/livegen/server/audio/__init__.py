"""OpenAI's audio API (``/v1/audio/*``): the routes, the request checks, the codec and the
transcript formats."""

"""Wire events and codecs for both session kinds; pure, no I/O.

Bytes in, typed events out, and back. The only code that touches raw JSON
dicts; everything past it sees typed events or a ``RemoteProtocolError``.
"""

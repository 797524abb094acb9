"""WebRTC for both kinds of session: the peer machinery (aiortc) and the voice and world calls
built on it, with their routes (setup, hangup, attach)."""

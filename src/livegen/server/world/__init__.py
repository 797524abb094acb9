"""World sessions on the wire: the ``/v1/worlds`` WebSocket service, its video stream and its
recordings."""

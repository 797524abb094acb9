"""Python clients for voice and world sessions."""

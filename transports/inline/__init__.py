"""The ``inline`` transport: every endpoint in one process (threads), for debugging and fast tests."""

"""Ape-X DQN: prioritised replay inside the trainer (docs/replay.md)."""

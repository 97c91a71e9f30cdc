"""R2D2: recurrent replay distributed DQN (``zoo train r2d2``; docs/replay.md)."""

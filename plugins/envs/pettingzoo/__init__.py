"""PettingZoo Parallel environments."""

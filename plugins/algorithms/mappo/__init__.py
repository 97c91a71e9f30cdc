"""MAPPO: multi-agent PPO with a centralised critic (``zoo train mappo``)."""

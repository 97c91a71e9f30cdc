"""Soft Actor-Critic (``zoo train sac``)."""

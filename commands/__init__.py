"""Arbiter's domain: commands, compact object state and the one decision function. Pure Python."""

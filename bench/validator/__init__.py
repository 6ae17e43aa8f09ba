"""Validator benchmark: preloaded commands drained by each state backend beside a raw Kafka pass-through."""

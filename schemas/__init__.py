"""Avro schemas of commands, events, rejections and state, and their Confluent wire-format codec."""

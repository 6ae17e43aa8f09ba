"""Avro schemas of commands, events, rejections and state, and their Confluent wire-format codec; beside them the
other records Arbiter writes: the parked-record envelope (``parked``) and the rules control record (``rules_control``).
"""

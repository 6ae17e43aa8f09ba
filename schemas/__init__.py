"""Avro schemas of commands, events, rejections and state, and their Confluent wire-format codec; beside them the
other records Arbiter writes: the parked-record envelope (``parked``), the rules control record (``rules_control``)
and the commands topic's generation record (``generations``).
"""

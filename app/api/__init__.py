"""The Command API: HTTP onto the keyed commands topic, synchronous outcomes and the query side."""

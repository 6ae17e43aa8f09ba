"""The like-for-like peer benchmark: Arbiter on the command stream of ``../shared/peer`` (Kafka Streams, Quix, raw).

``convert`` turns the peer's generated JSONL into Arbiter's commands and computes what each side should decide;
``cpu`` splits CPU seconds by component from /proc; ``__main__`` runs it all (``python -m bench.peer``). Peer
code and data are read from their directory at run time, never copied here.
"""

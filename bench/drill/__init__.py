"""The production-shape drill (``python -m bench.drill``): three brokers, a Spark cluster, two APIs, two of each
projection, a steady load through the API and five faults, checked against the sequential oracle.

``stack`` starts and stops the processes (by PID), ``load`` drives the API and watches the topics, ``verdict``
compares what was written with ``commands.decide`` and sums each fault's figures. It may import ``app``,
``bench``, ``commands``, ``projections`` and ``schemas``, and the topic oracle of ``tests.integration``.
"""

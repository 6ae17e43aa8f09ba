"""The load generator behind ``arbiter load`` and the benchmarks: a command workload and an open-loop driver.

Holds: ``workload`` (a realistic mix of commands, their tally, and the HTTP/1.1 client that sends them through
the API), ``openloop`` (requests scheduled at a fixed rate, latency timed from the scheduled send). May import
``commands`` and ``schemas``; nothing that runs the pipeline imports it.
"""

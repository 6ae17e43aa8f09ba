"""The embedded infrastructure of the quick start: a KRaft broker and a PostgreSQL server on 127.0.0.1, and the jars.

Holds: ``kafka_broker`` (Apache Kafka from Maven Central jars), ``postgres_server`` (Debian's server binaries in
a private cluster), ``jars`` (fetching the broker's and Spark's connector jars). May import the wiring at the top
of ``app`` (settings, errors) and ``app.run.pidfile``; nothing on the request or command path imports this room
except to start the embedded servers.
"""

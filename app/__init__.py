"""Arbiter's adapters around the pure domain: HTTP, Kafka, Spark and stores, wired from one ``Settings``.

The top of this package holds only the wiring every room uses: ``settings``, ``limits``, ``topics``, ``errors``,
``read_models`` (which read-model backend the API and projections open), ``spark_session``, ``signing`` (the
signature of command records: the API signs, the validator checks) and ``traces`` (the W3C trace context on
records: the API stores it, the validator copies it, the projections continue it) and ``kafka_client`` (librdkafka
settings the long-lived clients share). Each room below
holds one job: ``api`` (the HTTP command and query API), ``validator`` (the Spark job), ``contract`` (registry
subjects and setup, the AsyncAPI document: what downstream consumers rely on), ``status`` (the live
status page's figures), ``cli`` (the ``arbiter`` command), ``local`` (the embedded broker and PostgreSQL of the
quick start), ``run`` (the supervisor of ``arbiter run``), ``load`` (the load generator), ``native`` (the
optional mypyc build) and ``metrics`` (Prometheus plumbing). Imports run from ``app`` down to ``projections``,
``schemas`` and ``commands``, never up; the wiring here may use ``local`` for its embedded defaults (the local
PostgreSQL's address, the Spark connector's jars).

Importing this package first activates the optional mypyc build (``app.native.loader``).
"""

from app.native.loader import activate

activate()

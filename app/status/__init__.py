"""The live status page: what the pipeline is doing now, served by the API at ``/``."""

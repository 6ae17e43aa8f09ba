"""What the API tells operators: Prometheus metrics and traces.

Imports nothing from app.api.
"""

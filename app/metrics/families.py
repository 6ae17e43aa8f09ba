"""Builders of Prometheus metric families that several collectors share."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily


def gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> GaugeMetricFamily:
    """Return a gauge family holding one sample of ``value`` (with ``labels``, if any)."""
    g = GaugeMetricFamily(name, doc, labels=list(labels or {}))
    g.add_metric(list((labels or {}).values()), value)
    return g

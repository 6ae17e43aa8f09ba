"""The audit trail: every decision (events and rejections) in rocksdict with a SHA-256 hash chain per partition."""

from projections.audit.projection import AuditProjection
from projections.audit.verify import HistoryEntry, Problem, VerifyReport, history, verify

__all__ = ["AuditProjection", "HistoryEntry", "Problem", "VerifyReport", "history", "verify"]

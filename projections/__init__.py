"""Arbiter's read side: the DB read model, the audit trail and the operations log, fed by one small runner."""

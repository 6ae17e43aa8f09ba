"""Arbiter's adapters around the pure domain; importing this package first activates its optional mypyc build."""

from app.native import activate

activate()

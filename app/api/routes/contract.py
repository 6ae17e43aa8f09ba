"""Mount the routes downstream consumers read: the read-only schema registry and the AsyncAPI document."""

from __future__ import annotations

from fastapi import FastAPI

from app.api.routes import asyncapi, registry


def mount(app: FastAPI) -> None:
    """Add ``/registry/...`` and ``/asyncapi.json`` to ``app``."""
    app.include_router(registry.router)
    app.include_router(asyncapi.router)

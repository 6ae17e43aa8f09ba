"""A read-only Confluent-compatible schema registry at ``/registry``, served from the repository's schema catalog.

What stock deserializers and tools call: ``GET /schemas/ids/{id}``, ``/schemas/ids/{id}/versions``, ``/subjects``,
``/subjects/{s}/versions``, ``/subjects/{s}/versions/{v|latest}``, ``/config``, ``/config/{s}`` and the lookup
``POST /subjects/{s}``. Ids are the ones Arbiter writes (``schemas/ids.json``); subjects are each record's full
name and ``<topic>-value`` (``app.contract.subjects``). Open to anyone, like any registry's reads: schemas
are the published contract. Errors are the registry's own JSON (``error_code``), not problem documents.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.contract.subjects import COMPATIBILITY, subject_versions
from app.settings import Settings
from schemas.catalog import SchemaCatalog, SchemaVersion
from schemas.codec import default_codec

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
PREFIX = "/registry"

# Not in the OpenAPI document: this is the Confluent registry protocol (its own errors, not problem documents).
router = APIRouter(prefix=PREFIX, tags=["schema registry"], include_in_schema=False)


def _answer(body: Any, status: int = 200) -> JSONResponse:  # noqa: ANN401
    return JSONResponse(body, status_code=status, media_type=CONTENT_TYPE)


def _error(code: int, message: str) -> JSONResponse:
    return _answer({"error_code": code, "message": message}, code // 100)


def _catalog(request: Request) -> SchemaCatalog:
    """Return the catalog the codecs use (an app may carry another as ``state.schema_catalog``)."""
    catalog: SchemaCatalog | None = getattr(request.app.state, "schema_catalog", None)
    return catalog if catalog is not None else default_codec.catalog


def _subjects(request: Request) -> dict[str, list[SchemaVersion]]:
    settings: Settings = request.app.state.settings
    return subject_versions(settings, _catalog(request))


def _entry(subject: str, number: int, v: SchemaVersion) -> dict[str, Any]:
    return {"subject": subject, "version": number, "id": v.schema_id, "schema": v.text}


@router.get("/schemas/ids/{schema_id}", summary="The schema with this id (what a deserializer asks)")
async def schema_by_id(schema_id: int, request: Request) -> JSONResponse:
    v = _catalog(request).by_id(schema_id)
    if v is None or v.version < 1:
        return _error(40403, "Schema not found")
    return _answer({"schema": v.text})


@router.get("/schemas/ids/{schema_id}/versions", summary="Every subject and version holding this id")
async def versions_of_id(schema_id: int, request: Request) -> JSONResponse:
    found = [{"subject": s, "version": n} for s, vs in _subjects(request).items()
             for n, v in enumerate(vs, 1) if v.schema_id == schema_id]
    return _answer(found) if found else _error(40403, "Schema not found")


@router.get("/subjects", summary="Every subject")
async def subjects(request: Request) -> JSONResponse:
    return _answer(sorted(_subjects(request)))


@router.get("/subjects/{subject}/versions", summary="A subject's version numbers")
async def subject_versions_route(subject: str, request: Request) -> JSONResponse:
    vs = _subjects(request).get(subject)
    return _answer(list(range(1, len(vs) + 1))) if vs else _error(40401, f"Subject '{subject}' not found.")


@router.get("/subjects/{subject}/versions/{version}", summary="One version of a subject, or its latest")
async def subject_version(subject: str, version: str, request: Request) -> JSONResponse:
    vs = _subjects(request).get(subject)
    if not vs:
        return _error(40401, f"Subject '{subject}' not found.")
    number = len(vs) if version in ("latest", "-1") else _version_number(version)
    if number is None:
        return _error(42202, f"The specified version '{version[:20]}' is not a valid version id. Allowed values are "
                             f"between [1, {MAX_VERSION}] and the string \"latest\"")
    if not 1 <= number <= len(vs):
        return _error(40402, f"Version {version} not found.")
    return _answer(_entry(subject, number, vs[number - 1]))


#: Confluent's own bound on a version id (a Java int); a longer digit string is not parsed at all.
MAX_VERSION = 2**31 - 1


def _version_number(version: str) -> int | None:
    """Return ``version`` as a version id: ASCII digits only (``str.isdigit`` admits ``²``, which ``int`` refuses),
    at most ``MAX_VERSION``; None for anything else."""
    if not version.isascii() or not version.isdigit() or len(version) > len(str(MAX_VERSION)):
        return None
    number = int(version)
    return number if number <= MAX_VERSION else None


@router.post("/subjects/{subject}", summary="Look a schema up under a subject (no registration: read-only)")
async def lookup(subject: str, request: Request) -> JSONResponse:
    vs = _subjects(request).get(subject)
    if not vs:
        return _error(40401, f"Subject '{subject}' not found.")
    try:
        wanted = json.loads(json.loads(await request.body())["schema"])
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: nested deeper than json parses
        return _error(42201, "Invalid schema")
    for number, v in enumerate(vs, 1):
        if v.schema == wanted:
            return _answer(_entry(subject, number, v))
    return _error(40403, "Schema not found")


@router.get("/config", summary="The compatibility level")
async def config() -> JSONResponse:
    return _answer({"compatibilityLevel": COMPATIBILITY})


@router.get("/config/{subject}", summary="A subject's compatibility level")
async def subject_config(subject: str, request: Request) -> JSONResponse:
    if subject not in _subjects(request):
        return _error(40401, f"Subject '{subject}' not found.")
    return _answer({"compatibilityLevel": COMPATIBILITY})

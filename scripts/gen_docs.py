"""The documentation's reference pages and numbers, generated from the code, never typed (issue 39).

Used two ways:

- as an MkDocs hook (``hooks:`` in ``mkdocs.yml``): ``on_files`` adds the generated pages under ``reference/``
  (settings, limits, codes, CLI) to the site, and ``on_page_markdown`` replaces every ``{{gen NAME}}`` in a
  hand-written page with the value the code defines (an unknown NAME fails the build);
- as a script: ``python scripts/gen_docs.py [DIR]`` writes the generated pages to DIR (default
  ``var/docs-reference``) to read them without building the site, and ``python scripts/gen_docs.py --names``
  lists every ``{{gen NAME}}`` with its value.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import inspect
import io
import pkgutil
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GEN = re.compile(r"\{\{gen ([a-z]+\.[A-Za-z0-9_.\-]+)\}\}")  # a dotted name: ``{{gen NAME}}`` in prose stays as is
SECTION = re.compile(r"^\s*# --- (.+?) -+\s*$")
FIELD = re.compile(r"^    ([a-z][a-z0-9_]*)\s*:")


def _n(value: int) -> str:
    """Return ``value`` with thousands separators (as the prose writes numbers)."""
    return f"{value:,}"


def _cell(text: str) -> str:
    """Return ``text`` safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


# --- settings ----------------------------------------------------------------------------------------------------

def _default(name: str, field: Any) -> str:  # noqa: ANN401 - a pydantic FieldInfo
    """Return a field's default as the reference shows it: paths relative to the project root, secrets hidden."""
    from pydantic import SecretStr

    from app.settings import ROOT as SETTINGS_ROOT

    if field.default_factory is not None:
        value = field.default_factory()
    else:
        value = field.default
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return "(a development-only placeholder)"
    if isinstance(value, Path):
        if value == SETTINGS_ROOT:
            return "the project root"
        return f"`{value}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int):
        return f"`{value}`" if value < 10_000 else f"`{value}` ({_n(value)})"
    if isinstance(value, dict | list) and not value:
        return "`{}`" if isinstance(value, dict) else "`[]`"
    return f"`{value!r}`" if value == "" else f"`{value}`"


def _plain(field: Any) -> str:  # noqa: ANN401
    """Return a field's default as prose writes it: ``50,000``, ``30``, ``0.25``, ``rocksdb``."""
    value = field.default_factory() if field.default_factory is not None else field.default
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return _n(value)
    if isinstance(value, float):
        return f"{value:g}" if value < 1e6 else _n(int(value))
    return "unset" if value is None else str(value)


def _human(name: str, value: int | float) -> str:
    """Return a duration or size default in the unit a reader thinks in: ``7 days``, ``10 s``, ``1 MiB``."""
    if name.endswith("_ms"):
        for unit, ms in (("day", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
            if value and value % ms == 0:
                n = int(value // ms)
                return f"{n} {unit}{'s' if unit == 'day' and n != 1 else ''}"
        return f"{_n(int(value))} ms"
    if name.endswith("_s"):
        if value and value % 3600 == 0:
            return f"{int(value // 3600)} h"
        return f"{value:g} s"
    if name.endswith("_mb"):
        return f"{_n(int(value))} MiB"
    if name.endswith("_bytes"):
        for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value and value % size == 0:
                return f"{_n(int(value // size))} {unit}"
    return _n(int(value)) if isinstance(value, int) else f"{value:g}"


def _type(field: Any) -> str:  # noqa: ANN401
    """Return a field's type, short (``Literal['a', 'b']`` as ``a`` \\| ``b``)."""
    text = str(field.annotation).replace("typing.", "").replace("pathlib.", "").replace("pydantic.types.", "")
    text = re.sub(r"<class '([^']+)'>", r"\1", text)
    literal = re.fullmatch(r"Literal\[(.*)\]", text)
    if literal:
        return " or ".join(f"`{v.strip().strip(chr(39))}`" for v in literal.group(1).split(","))
    return f"`{text}`"


def _bounds(field: Any) -> str:  # noqa: ANN401
    """Return a field's constraints (``ge``, ``le``, ``pattern``, …) as ``≥ 1, ≤ 64``."""
    out = []
    for m in field.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("pattern", "matches")):
            value = getattr(m, attr, None)
            if value is not None:
                out.append(f"{sign} `{value}`" if not isinstance(value, int) else f"{sign} {_n(value)}")
    return ", ".join(out)


def _sections() -> dict[str, str]:
    """Return each setting's section, from the ``# --- name ---`` comments of ``app/settings.py``."""
    sections, current = {}, "General"
    for line in (ROOT / "app" / "settings.py").read_text("utf-8").splitlines():
        if m := SECTION.match(line):
            current = m.group(1).strip()
        elif m := FIELD.match(line):
            sections[m.group(1)] = current
    return sections


def settings_page() -> str:
    """Return the settings reference: every field of ``app.settings.Settings`` with its default and description."""
    from app.settings import Settings

    sections = _sections()
    prefix = Settings.model_config.get("env_prefix", "")
    out = ["# Settings", "",
           "Generated from `app/settings.py` at build time: every `ARBITER_*` environment variable `Settings` reads, "
           "with its type, default, bounds and description. The descriptions are the code's own; a setting without "
           "one is explained where its feature is documented.", "",
           'librdkafka and Spark options pass through by their own dotted names as JSON objects: '
           "`ARBITER_KAFKA_CONFIG='{\"linger.ms\": \"5\"}'`, `ARBITER_SPARK_CONF='{\"spark.sql.shuffle.partitions\": "
           "\"8\"}'`.", ""]
    by_section: dict[str, list[str]] = {}
    for name, field in Settings.model_fields.items():
        row = (f"| `{prefix.upper()}{name.upper()}` | {_type(field)} | {_default(name, field)} | {_bounds(field)} "
               f"| {_cell(field.description or '')} |")
        by_section.setdefault(sections.get(name, "General"), []).append(row)
    for section, rows in by_section.items():
        out += [f"## {section[:1].upper()}{section[1:]}", "", "| variable | type | default | bounds | description |",
                "|---|---|---|---|---|", *rows, ""]
    return "\n".join(out)


# --- limits ------------------------------------------------------------------------------------------------------

def values() -> dict[str, str]:
    """Return every ``{{gen NAME}}`` the pages may use and its value, computed from the code at its defaults."""
    from app import limits
    from app.api import rules as api_rules
    from app.api.http.body_limit import object_body_limit
    from app.settings import Settings
    from app.validator.fold import limits_for
    from commands import KEEP_BYTES
    from commands.rules import bounds

    s = Settings()
    lim = limits.for_settings(s)
    out: dict[str, str] = {}
    for name, field in Settings.model_fields.items():
        out[f"settings.{name}"] = _plain(field)
        default = field.default_factory() if field.default_factory is not None else field.default
        if isinstance(default, int | float) and not isinstance(default, bool):
            out[f"settings.{name}.human"] = _human(name, default)
    for attr in ("max_message_bytes", "max_record_bytes", "max_document_bytes", "keep_bytes", "max_id_bytes"):
        out[f"limits.{attr}"] = _n(getattr(lim, attr))
    for name, value in vars(limits).items():
        if name.isupper() and isinstance(value, int):
            out[f"limits.{name}"] = _n(value)
    out["limits.identity_bytes"] = _n(limits.identity_bytes())
    out["limits.max_object_body_bytes"] = _n(object_body_limit(s.max_body_bytes, s.max_object_body_bytes,
                                                                lim.max_document_bytes))
    out["limits.parked_max_message_bytes"] = _n(limits.topic_max_message_bytes(s, s.parked_topic))
    for key, value in limits.sink_options(s).items():
        out[f"limits.sink.{key.removeprefix('kafka.')}"] = _n(int(value))
    for key, value in limits.api_producer_config(s).items():
        out[f"limits.api_producer.{key}"] = _n(int(value))
    out["limits.KEEP_BYTES"] = _n(KEEP_BYTES)
    from app.rescale.generation import WATCH_INTERVAL_S
    from app.rescale.handover import HANDOVER_INTERVAL_S
    from app.rescale.late import LATE_INTERVAL_S
    out["rescale.WATCH_INTERVAL_S"] = f"{WATCH_INTERVAL_S:g}"
    out["rescale.HANDOVER_INTERVAL_S"] = f"{HANDOVER_INTERVAL_S:g}"
    out["rescale.LATE_INTERVAL_S"] = f"{LATE_INTERVAL_S:g}"
    from commands.rules.meta_schema import MAX_CASE_STEPS, MAX_CASES
    out["rules.MAX_CASES"], out["rules.MAX_CASE_STEPS"] = _n(MAX_CASES), _n(MAX_CASE_STEPS)
    from app.api.writes.claim_fold import SLACK_MS
    from app.api.writes.claims import SKIP_LOG_INTERVAL_S, claims_retention_ms
    out["claims.SLACK_MS"] = _human("SLACK_MS".lower(), SLACK_MS)
    out["claims.SKIP_LOG_INTERVAL_S"] = _human("skip_log_interval_s", SKIP_LOG_INTERVAL_S)
    out["claims.retention_ms"] = _human("retention_ms", claims_retention_ms(s))
    from app.cli.rescale import DEFAULT_WAIT_S
    out["rescale.default_wait_s"] = f"{DEFAULT_WAIT_S:g} s"
    for name, value in vars(bounds).items():  # the rules language's bounds (commands/rules/bounds.py)
        if name.isupper() and isinstance(value, int):
            out[f"rules.{name}"] = _n(value)
    out["rules.PRECHECK_DEADLINE_S"] = str(api_rules.PRECHECK_DEADLINE_S)
    from app.api import problems

    for code, status in problems.STATUS.items():  # each problem code's HTTP status (app/api/problems.py)
        out[f"status.{code}"] = str(status)
    domain = limits_for(s)
    for f in dataclasses.fields(domain):
        value = getattr(domain, f.name)
        out[f"domain.{f.name}"] = _n(value) if isinstance(value, int) else str(value)
    return out


def limits_page() -> str:
    """Return the limits reference: the chain of ``app/limits.py`` computed at the default settings."""
    from app import limits
    from app.api.http.body_limit import object_body_limit
    from app.settings import Settings
    from app.validator.fold import limits_for

    s = Settings()
    lim = limits.for_settings(s)
    m = s.max_message_bytes
    rows = [
        ("`ARBITER_MAX_MESSAGE_BYTES` (M)", m, "each topic's `max.message.bytes`: the largest record batch the "
         "broker takes; every size below derives from it"),
        ("record (key + value) Arbiter writes", lim.max_record_bytes,
         f"M − {limits.FRAME_BYTES} (`FRAME_BYTES`, the Java producer's bound on a one-record batch's framing) − "
         f"{_n(limits.HEADERS_BYTES)} (`HEADERS_BYTES`, the outputs' CloudEvents headers and a trace context) − "
         f"{_n(limits.MARGIN_BYTES)} (`MARGIN_BYTES`); the API producer refuses a command over it"),
        ("document or patch", lim.max_document_bytes, "the largest whose event and command still fit a record with "
         f"every id at {lim.max_id_bytes} bytes (from the Avro schemas' worst case); larger is `413 TOO_LARGE`"),
        ("request body, every route but the batch", object_body_limit(s.max_body_bytes, s.max_object_body_bytes,
                                                                         lim.max_document_bytes),
         "`ARBITER_MAX_OBJECT_BODY_BYTES`; unset = the largest document + 1 KiB, never above "
         "`ARBITER_MAX_BODY_BYTES`; larger is `413 BODY_TOO_LARGE`"),
        ("request body of `POST /commands:batch`", s.max_body_bytes, "`ARBITER_MAX_BODY_BYTES`"),
        ("commands in one batch", s.batch_max_commands, "`ARBITER_BATCH_MAX_COMMANDS`"),
        ("sender identity a command may carry", limits.identity_bytes(), f"groups (at most {limits.MAX_GROUPS} of "
         f"{limits.GROUP_NAME_BYTES} bytes), issuer, jti: a document within this of the largest, from such a caller, "
         "is `413 TOO_LARGE`"),
        ("bytes of a bad record's key and value a rejection keeps", lim.keep_bytes, "each; plus their full lengths "
         "and SHA-256"),
        ("parked topic's `max.message.bytes`", limits.topic_max_message_bytes(s, s.parked_topic),
         f"M + {_n(limits.PARKED_MARGIN_BYTES)} (`PARKED_MARGIN_BYTES`): a command that fit its topic fits with its "
         "envelope"),
    ]
    for key, value in limits.sink_options(s).items():
        rows.append((f"validator sink `{key.removeprefix('kafka.')}`", int(value), "Spark's Kafka sink (Java producer)"))
    for key, value in limits.api_producer_config(s).items():
        rows.append((f"API producer `{key}`", int(value), "librdkafka: a record's wire size with the signature header"))
    for key, value in limits.source_options(s).items():
        rows.append((f"validator source `{key.removeprefix('kafka.')}`", int(value), "Spark's Kafka source"))
    for key, value in limits.consumer_config(s).items():
        rows.append((f"projections' consumer `{key}`", int(value), "librdkafka"))
    out = ["# Limits", "",
           "Generated from `app/limits.py` at build time, computed at the default settings. One setting, "
           "`ARBITER_MAX_MESSAGE_BYTES`, sets every size in the chain; change it and every figure below moves with it "
           "(`app.limits.size_limits(M)`).", "",
           "| limit | bytes (or count) at the defaults | how it is derived |", "|---|---:|---|"]
    out += [f"| {what} | {_n(value)} | {_cell(how)} |" for what, value, how in rows]
    domain = limits_for(s)
    out += ["", "## The domain's limits", "",
            "What `commands.decide` enforces per object (`commands.state.Limits`), as the validator builds them from "
            "the settings (`app.validator.fold.limits_for`).", "", "| limit | value |", "|---|---:|"]
    for f in dataclasses.fields(domain):
        value = getattr(domain, f.name)
        shown = _n(value) if isinstance(value, int) else str(value)
        out.append(f"| `{f.name}` | {shown} |")
    out += ["", "## Constants", "", "| constant in `app/limits.py` | value |", "|---|---:|"]
    source = (ROOT / "app" / "limits.py").read_text("utf-8")
    for name, value in vars(limits).items():
        if name.isupper() and isinstance(value, int) and re.search(rf"^{name} = ", source, re.M):
            out.append(f"| `{name}` | {_n(value)} |")
    return "\n".join(out) + "\n"


# --- codes -------------------------------------------------------------------------------------------------------

def _error_classes() -> Iterator[type]:
    """Yield every subclass of ``ArbiterError`` defined in the project's packages (importing them all)."""
    from commands.errors import ArbiterError

    for package in ("commands", "schemas", "projections", "app"):
        mod = importlib.import_module(package)
        for info in pkgutil.walk_packages(mod.__path__, package + "."):
            if ".native." in info.name or info.name.endswith("__main__"):
                continue
            importlib.import_module(info.name)
    seen: set[type] = set()
    stack = [ArbiterError]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
                yield sub


def codes_page() -> str:
    """Return the codes reference: reason codes, the API's problem codes with their HTTP status, error classes."""
    from app.api import problems
    from commands.errors import ReasonCode

    titles = getattr(problems, "_TITLES", {})
    out = ["# Reason and problem codes", "",
           "Generated from the code at build time. A *reason code* (`commands.errors.ReasonCode`) is why the validator "
           "rejected a command: the same code is on the `rejections` topic, in HTTP answers and in metrics. A *problem "
           "code* is the `code` of an `application/problem+json` answer (RFC 9457): a reason code, or one of the "
           "API's own. Every status comes from `app/api/problems.py` (`STATUS`).", "",
           "## Reason codes", "", "| reason | HTTP status | title |", "|---|---:|---|"]
    for code in ReasonCode:
        status = problems.STATUS.get(code, "")
        note = " (412 when the request carried `If-Match`)" if code == ReasonCode.VERSION_CONFLICT else ""
        out.append(f"| `{code.value}` | {status}{note} | {_cell(titles.get(code, ''))} |")
    out += ["", "## The API's own problem codes", "", "| code | HTTP status | title |", "|---|---:|---|"]
    for code, status in problems.STATUS.items():
        if code not in set(ReasonCode):
            out.append(f"| `{code}` | {status} | {_cell(titles.get(code, ''))} |")
    out += ["", "## Error classes", "",
            "Every `ArbiterError` subclass with a code of its own; the `arbiter` command prints "
            "`arbiter: error [CODE]: …` and exits 2 on any of them. Some raise sites pass a more specific code.", "",
            "| code | class | what it means |", "|---|---|---|"]
    rows = set()
    for cls in _error_classes():
        code = cls.__dict__.get("code")
        if isinstance(code, str):
            doc = (inspect.getdoc(cls) or "").split("\n\n")[0]
            rows.add((code, f"`{cls.__module__}.{cls.__qualname__}`", _cell(doc)))
    out += [f"| `{code}` | {where} | {doc} |" for code, where, doc in sorted(rows)]
    return "\n".join(out) + "\n"


# --- CLI ---------------------------------------------------------------------------------------------------------

def _help(parser: argparse.ArgumentParser) -> str:
    """Return ``parser``'s help at a fixed width (so the page does not depend on the terminal)."""
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100, max_help_position=32)
    return parser.format_help()


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Yield (name, parser) of every subcommand below ``parser``, depth first."""
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its subparsers nowhere public
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, sub in action.choices.items():
                yield name, sub
                yield from ((f"{name} {n}", p) for n, p in _subparsers(sub))


def cli_page() -> str:
    """Return the CLI reference: ``arbiter --help`` and every subcommand's ``--help``."""
    from app.cli import build_parser

    parser = build_parser()
    out = ["# The `arbiter` command", "", "Generated at build time from the command's own parser (`app/cli/`): "
           "what `arbiter --help` and `arbiter <command> --help` print.", "", "```text", _help(parser).rstrip(), "```",
           ""]
    for name, sub in _subparsers(parser):
        out += [f"## arbiter {name}", "", "```text", _help(sub).rstrip(), "```", ""]
    return "\n".join(out)


PAGES: dict[str, Callable[[], str]] = {
    "reference/settings.md": settings_page,
    "reference/limits.md": limits_page,
    "reference/codes.md": codes_page,
    "reference/cli.md": cli_page,
}


def render(markdown: str, where: str = "") -> str:
    """Return ``markdown`` with every ``{{gen NAME}}`` replaced by its value; raise ``KeyError`` on an unknown NAME."""
    table = values()

    def one(m: re.Match[str]) -> str:
        if m.group(1) not in table:
            raise KeyError(f"{where}: unknown {{{{gen {m.group(1)}}}}} (python scripts/gen_docs.py --names lists them)")
        return table[m.group(1)]

    return GEN.sub(one, markdown)


# --- MkDocs hook -------------------------------------------------------------------------------------------------

def on_files(files: Any, config: Any) -> Any:  # noqa: ANN401 - mkdocs types, imported lazily
    """Add the generated reference pages to the site."""
    from mkdocs.structure.files import File

    with contextlib.redirect_stdout(io.StringIO()):  # importing every module must not print into the build
        for path, page in PAGES.items():
            files.append(File.generated(config, path, content=page()))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:  # noqa: ANN401
    """Fill in the numbers the code defines."""
    return render(markdown, page.file.src_uri)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", default=str(ROOT / "var" / "docs-reference"))
    parser.add_argument("--names", action="store_true", help="list every {{gen NAME}} and its value")
    args = parser.parse_args(argv)
    if args.names:
        for name, value in sorted(values().items()):
            print(f"{name} = {value}")
        return 0
    for path, page in PAGES.items():
        target = Path(args.dir) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page(), "utf-8")
        print(target)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

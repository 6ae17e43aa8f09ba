# ruff: noqa: E501 - the moved texts keep their own line lengths
"""One-off (issue 39): move the README's sections into the docs site's pages, with the fixes made on the way.

Kept so that README edits which land after the move can be carried by running it again on the README as it was
before the move, with those edits merged in::

    git show <a commit whose README still has every section>:README.md > /tmp/README.full.md
    .venv/bin/python scripts/readme_to_docs.py /tmp/README.full.md docs

It splits the README at its ## and ### headings, writes each section to its page (MOVES), applies the fixes (each
must match exactly once, else it stops naming the fix: the README changed under it, look and adapt), replaces
typed setting defaults that equal the code's by {{gen settings.x}} (and prints those that differ: STALE?), turns
**Section** references into links and prints where each section went. Pages it does not write (index.md,
concepts/index.md, performance.md, benchmarks.md) are hand-written. Delete this script once main's README holds
none of the moved sections.
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path

README = Path(sys.argv[1] if len(sys.argv) > 1 else "README.md").read_text("utf-8")
OUT = Path(sys.argv[2] if len(sys.argv) > 2 else "docs")

# heading (as in README) -> page. A ### not listed stays with its ## parent.
MOVES = {
    "Quick start": "getting-started.md",
    "Status page and load": "operations/status-page.md",
    "Metrics": "operations/metrics.md",
    "Docker": "operations/running.md",
    "The local broker": "operations/running.md",
    "Configuration": "operations/running.md",
    "Versions": "operations/running.md",
    "Tests": "development.md",
    "Layout": "concepts/architecture.md",
    "Projections": "concepts/projections.md",
    "Backup and restore": "operations/backup.md",
    "Erasure": "operations/erasure.md",
    "Fast state backend": "concepts/state-backends.md",
    "Compiled domain": "development.md",
    "API": "api.md",
    "Consuming Arbiter's topics": "consuming.md",
    "Traces": "operations/traces.md",
    "The archive": "operations/archive.md",
    "The parking lot": "operations/parking-lot.md",
    "Security": "security.md",
    "Validator": "concepts/validator.md",
    "Rules": "concepts/rules.md",
    "Running on a cluster": "cluster.md",
    "Python client": "clients.md",
}
LEADS = {  # bold paragraph leads that other sections refer to: their page
    "Read-your-writes": "api.md", "Change feed": "api.md", "Identity": "api.md", "Fair shares": "api.md",
    "History and lists": "api.md", "Scopes": "api.md", "Errors": "api.md",
    "One writer across hosts": "concepts/state-backends.md",
}
SPLIT_H3 = {"Backup and restore", "Erasure", "Traces"}
TITLES = {  # page -> H1 for pages that gather several sections
    "operations/running.md": "Running Arbiter",
    "development.md": "Development",
    "getting-started.md": "Getting started",
    "concepts/architecture.md": "The pipeline",
}
INTRO = {
    "operations/running.md": "How to run the pipeline's parts: supervision by `arbiter run`, Docker, the local broker "
                             "and its topics, configuration and the pinned versions. Every setting with its default is "
                             "in the [settings reference](../reference/settings.md).",
}

# --- fixes: (page, old, new): each old must occur exactly once in its page ------------------------------------------
FIXES: list[tuple[str, str, str]] = []
POST: list = []


OPTIONAL = {"clients.md"}  # pages of sections that may not have landed yet: their fixes wait for them


def fix(page: str, old: str, new: str) -> None:
    FIXES.append((page, old, new))


def split(text: str) -> list[tuple[int, str, str]]:
    """Return (level, heading, body) for each ## / ### section; level 0 = before the first ##."""
    parts, level, head, buf, fence = [], 0, "", [], False
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"^(##|###) (.+?)\s*$", line)
        if m:
            parts.append((level, head, "".join(buf)))
            level, head, buf = len(m.group(1)), m.group(2), []
        else:
            buf.append(line)
    parts.append((level, head, "".join(buf)))
    return parts


def _num(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip("`"))
    except ValueError:
        return None


sys.path.insert(0, ".")
sys.path.insert(0, "scripts")
import gen_docs  # noqa: E402

GEN = gen_docs.values()


def generate_defaults(page: str, text: str) -> str:
    """Replace typed defaults of settings by {{gen settings.x}} where they equal the code's; report the others."""
    sys.path.insert(0, ".")
    from app.settings import Settings
    fields = Settings.model_fields

    def default(name: str) -> float | None:
        f = fields.get(name)
        if f is None:
            return None
        v = f.default_factory() if f.default_factory is not None else f.default
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    def inline(m: re.Match[str]) -> str:
        name = m.group("name").lower()
        want, got = default(name), _num(m.group("value"))
        if want is None or got is None:
            return m.group(0)
        unit = (m.groupdict().get("unit") or "").strip()
        if unit:
            key = f"settings.{name}.human"
            if GEN.get(key) == f"{m.group('value')} {unit}":
                return m.group(0).replace(f"{m.group('value')} {unit}", f"{{{{gen {key}}}}}", 1)
            if unit == "s" and want == got:
                return m.group(0).replace(m.group("value"), f"{{{{gen settings.{name}}}}}", 1)
            print(f"STALE? {page}: {m.group(0)!r}: code default {GEN.get(key)}", file=sys.stderr)
            return m.group(0)
        if want != got:
            print(f"STALE? {page}: {m.group(0)!r}: code default {want:g}", file=sys.stderr)
            return m.group(0)
        return m.group(0).replace(m.group("value"), f"{{{{gen settings.{name}}}}}", 1)

    text = re.sub(r"`ARBITER_(?P<name>[A-Z0-9_]+)`(?: \(|, )(?P<value>[0-9][0-9,.]*)(?P<unit> (?:days?|h|min|s|ms|MiB|KiB))?(?=[ ),;])",
                  inline, text)
    text = re.sub(r"^\| `ARBITER_(?P<name>[A-Z0-9_]+)` \| (?P<value>`?[0-9][0-9,.]*`?) \|", inline, text, flags=re.M)
    return text


def main() -> int:
    sections = split(README)
    pages: dict[str, list[tuple[int, str, str]]] = {}
    where: dict[str, str] = {}
    parent = None
    for level, head, body in sections[1:]:
        key = head.split(" (")[0]
        if level == 2:
            if key not in MOVES:
                print(f"UNMAPPED ## {head}", file=sys.stderr)
                return 1
            parent = MOVES[key]
            pages.setdefault(parent, []).append((2, head, body))
            where[key] = parent
        elif key in SPLIT_H3 and key in MOVES:
            pages.setdefault(MOVES[key], []).append((2, head, body))
            where[key] = MOVES[key]
        else:
            assert parent is not None
            pages[parent].append((3, head, body))
            where[key] = parent
    out: dict[str, str] = {}
    for page, parts in pages.items():
        if page in TITLES or len([p for p in parts if p[0] == 2]) > 1:
            text = f"# {TITLES.get(page, parts[0][1])}\n\n"
            if page in INTRO:
                text += INTRO[page] + "\n\n"
            for level, head, body in parts:
                text += f"{'#' * level} {head}\n{body}"
        else:  # one section: its heading is the page's title, its subsections move up a level
            (_, head, body), rest = parts[0], parts[1:]
            text = f"# {head}\n{body}" + "".join(f"{'#' * (lv - 1)} {h}\n{b}" for lv, h, b in rest)
        out[page] = text.rstrip() + "\n"
    for post in POST:
        post(out)
    for page, old, new in FIXES:
        if page in OPTIONAL and page not in out:
            continue
        n = out[page].count(old)
        if n != 1:
            print(f"FIX does not match once ({n}) in {page}: {old[:80]!r}", file=sys.stderr)
            return 1
        out[page] = out[page].replace(old, new)
    out = {page: generate_defaults(page, text) for page, text in out.items()}
    for page, text in out.items():
        def link(m: re.Match[str], page: str = page) -> str:
            name = m.group(1)
            target = where.get(name) or LEADS.get(name)
            if target is None:
                return m.group(0)
            rel = posixpath.relpath(target, posixpath.dirname(page) or ".")
            return f"[{name}]({rel})" if target != page else m.group(0)
        text = re.sub(r"\*\*([A-Z][A-Za-z' ]+?)\*\*(?!\.)", link, text)
        bench = posixpath.relpath("benchmarks.md", posixpath.dirname(page) or ".")
        text = text.replace("`docs/benchmarks.md`", f"[docs/benchmarks.md]({bench})")
        path = OUT / page
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    for key, page in where.items():
        print(f"{key} -> docs/{page}")
    return 0


# --- texts and fixes ---------------------------------------------------------------------------------------------

TIERS_TEXT = r'''
**Which tier to run.** Two commands, one per moment:

| when | command | what runs | time here |
|---|---|---|---|
| while editing | `./dev test --fast` | every test marked `unit`: no broker, Spark, PostgreSQL or browser | 5 min 17 s on 2026-11-26, with other sessions loading the 2 cores (load average 10–15); 1 min 14 s of CPU |
| before pushing (CI runs it) | `./dev test` | the whole suite, `unit` and `integration` | 14–20 min |

Pass pytest's own arguments after either (`./dev test --fast -k limits`, `./dev test tests/integration/test_x.py`).
Every test file carries a tier marker (`pytestmark = pytest.mark.unit` or `integration`, or one per test):
`tests/unit/test_tiers.py` fails on a test without one, so nothing falls between the tiers. Building this site is
a unit test too (`tests/unit/test_docs_site.py`: `mkdocs build --strict`, so a broken link or a warning fails it),
and so are the checks that every runnable snippet of these pages is run by a test.

'''.lstrip("\n")
SITE_TEXT = r'''
## The documentation site

`docs/` is an MkDocs site with the Material theme (`mkdocs.yml`; the `docs` extra of `pyproject.toml`, which
`./dev` installs). `.venv/bin/mkdocs serve -a 127.0.0.1:8001` serves it while you edit;
`tests/unit/test_docs_site.py` builds it with `mkdocs build --strict`, so a broken link, a missing anchor or a
page left out of the navigation fails the fast tier.

- **Generated, not typed.** The reference pages (settings, limits, codes, the CLI's help) are made at build time
  by the hook `scripts/gen_docs.py` from the code itself. A number the code defines is written `{{gen NAME}}` in a
  page and filled in by the same hook (`python scripts/gen_docs.py --names` lists the names and their values; an
  unknown name fails the build). `test_no_derived_size_is_typed_by_hand` fails if a size the limits chain computes
  is typed into a page or the README.
- **Snippets run as printed.** A Python or SQL block a reader may run carries a title
  (```` ```python title="consumer.py" ````); a test takes it with `tests.docs_snippets.snippet("consumer.py")` and
  runs it unchanged, with the `ARBITER_*` variables it reads pointing at the test's broker and topics.
  `test_every_runnable_snippet_is_run_by_a_test` fails on an untitled block or one no test runs.
- **One picture.** The pipeline's diagram is a Mermaid block (Material renders it); the README, the home page and
  [the pipeline](concepts/architecture.md) carry the same block, held equal by a test.
- **Benchmarks.** [The current figures](performance.md) are a table of the newest measurement of each figure with
  its command and commit; the [diary](benchmarks.md) keeps every run. Add a run at the top of the diary and update
  the table's row.
'''.lstrip("\n")
ARCHITECTURE_TEXT = r'''
A command travels from a client through the API onto the `commands` topic; the validator decides it against the
object's compact state and writes an event or a rejection; projections turn decisions into things people read.
Every arrow below is a Kafka topic read or written, or a store opened; the picture's source is the Mermaid block
in this page (and, the same block, in the README: `tests/unit/test_docs_site.py` holds the two equal).

```mermaid
flowchart LR
    client([clients]) -- "POST / PATCH / DELETE" --> api[API<br/>arbiter api]
    client -- "GET objects, history, lists" --> api
    api -- produce, signed --> commands[(commands)]
    commands --> validator[validator<br/>Spark + state shards]
    validator <--> state[(validator state<br/>checkpoint + shards)]
    validator --> events[(events)]
    validator --> rejections[(rejections)]
    validator -- "undecodable bytes" --> parked[(commands-parked)]
    events --> db[DB projection<br/>arbiter project db]
    db --> readmodel[(read model<br/>RocksDB or PostgreSQL)]
    events --> audit[audit projection]
    rejections --> audit
    parkedlog[(commands-parked-log)] --> audit
    audit --> auditstore[(audit store<br/>hash chains)]
    events --> log[log projection]
    rejections --> log
    log --> logfile[(decision log)]
    commands --> archive[archive<br/>arbiter archive run]
    events --> archive
    rejections --> archive
    parked --> archive
    archive --> parquet[(Parquet archive)]
    readmodel -- reads --> api
    events -- "outcomes (Prefer: wait), change feed" --> api
    rejections -- outcomes --> api
    auditstore -- "roles for the change feed" --> api
    parked -- "arbiter parked redrive" --> commands
    events --> others([other services])
    rejections --> others
```

## Who reads what

| component | command | reads | writes |
|---|---|---|---|
| API | `arbiter api` | HTTP requests; `events` and `rejections` (outcomes for `Prefer: wait`, the change feed); the read model; the audit store (`GET /commands/{id}`, the change feed's roles); the parked topics (status page) | `commands` (signed) |
| validator | `arbiter validator` | `commands` | `events`, `rejections`, `commands-parked`; its state (checkpoint and shards) |
| DB projection | `arbiter project db` | `events` | the read model (RocksDB or PostgreSQL) |
| audit projection | `arbiter project audit` | `events`, `rejections`, `commands-parked-log` | the audit store (hash chains) |
| log projection | `arbiter project log` | `events`, `rejections` | the decision log (JSON lines) |
| archive | `arbiter archive run` | `commands`, `events`, `rejections`, `commands-parked` | the Parquet archive |
| operator | `arbiter parked redrive\|discard` | `commands-parked` | `commands` (a redrive), `commands-parked-log` |
| other services | stock Kafka clients | `events`, `rejections` (schemas from the API's `/registry`) | — |

`arbiter run` starts the local broker, the validator, the three projections, the API and the archive, and
supervises them ([Running](../operations/running.md)); `./dev run` is `arbiter run` after installing what it
needs. Every component's settings are in the [settings reference](../reference/settings.md).

'''.lstrip("\n")

# Fixes applied to the moved README text: stale numbers generated or cited, snippets made runnable as printed.
fix("security.md", "(M, default 1,048,576,\n64 KiB–64 MiB)",
    "(M, default {{gen limits.max_message_bytes}}; its bounds are in the [settings reference](reference/settings.md))")
fix("security.md", "the validator sink's `max.request.size` is M; any record Arbiter writes has at most M − 93 − 1,024 =\n"
    "1,047,459 bytes of key and value (93: the Java producer's bound on a one-record batch's framing; 1 KiB margin), and",
    "the validator sink's `max.request.size` is M + `PARKED_MARGIN_BYTES` ({{gen limits.sink.max.request.size}} bytes at "
    "the default: a parked record may be that large, see **The parking lot**); any record Arbiter writes has at most "
    "M − `FRAME_BYTES` − `HEADERS_BYTES` − `MARGIN_BYTES` = {{gen limits.max_record_bytes}} bytes of key and value "
    "({{gen limits.FRAME_BYTES}}: the Java producer's bound on a one-record batch's framing; {{gen limits.HEADERS_BYTES}}: "
    "the outputs' CloudEvents headers and a trace context; {{gen limits.MARGIN_BYTES}}: margin), and")
fix("security.md", "(`Limits.max_document_bytes`, 1,045,711\nbytes at the default)",
    "(`Limits.max_document_bytes`, {{gen limits.max_document_bytes}}\nbytes at the default)")
fix("security.md", "keeps at most 64 KiB each of", "keeps at most {{gen limits.keep_bytes}} bytes each of")
fix("security.md", "its message at most 1,000 characters and ids\nclipped to 256 bytes",
    "its message at most {{gen limits.MESSAGE_CHARS}} characters and ids\nclipped to {{gen limits.max_id_bytes}} bytes")
fix("security.md", "(ids clipped, coordinates and the first 1 KiB kept)",
    "(ids clipped, coordinates and the first {{gen limits.FALLBACK_KEEP_BYTES}} bytes kept)")
fix("security.md", "fits on `rejections`.", "fits on `rejections`. Every figure of the chain at the defaults is in the "
    "[limits reference](reference/limits.md), computed from `app/limits.py`.")
fix("api.md", "(a batch over `ARBITER_MAX_BODY_BYTES`, 1 MiB, or\n`ARBITER_BATCH_MAX_COMMANDS`, 50,000; any other route's "
    "body over `ARBITER_MAX_OBJECT_BODY_BYTES`, unset = the largest\ndocument + 1 KiB, 1,046,735 bytes at the defaults,",
    "(a batch over `ARBITER_MAX_BODY_BYTES`, {{gen settings.max_body_bytes.human}}, or\n`ARBITER_BATCH_MAX_COMMANDS`, "
    "{{gen settings.batch_max_commands}}; any other route's body over `ARBITER_MAX_OBJECT_BODY_BYTES`, unset = the "
    "largest\ndocument + 1 KiB, {{gen limits.max_object_body_bytes}} bytes at the defaults,")
fix("api.md", "within ~2.4 KiB of the largest", "within {{gen limits.identity_bytes}} bytes of the largest")
fix("api.md", "(see `docs/benchmarks.md` once the lead has run it)",
    "(measured at main `f45e7d8`: ~12 µs of the API's CPU per frame delivered at 100 subscribers; see "
    "[Benchmarks](performance.md))")
fix("operations/parking-lot.md", "are `ARBITER_MAX_MESSAGE_BYTES` + 1 KiB,",
    "are `ARBITER_MAX_MESSAGE_BYTES` + `PARKED_MARGIN_BYTES` ({{gen limits.parked_max_message_bytes}} bytes at the "
    "defaults),")
fix("operations/running.md", "(see **Security**, Limits)", "(see the [limits reference](../reference/limits.md))")
fix("operations/archive.md", "It has only been run at\n20,000 commands here (a check that it works, its figures dominated "
    "by start-up); no figure at scale is in\n`docs/benchmarks.md` yet, nor a rebuild or restore time at 1M objects.",
    "Its newest figures (400,000 commands, commit `4292c5e`: the archive at 20.6k records/s on one core, a rebuild "
    "from it at 22.3k events/s) are in [Benchmarks](../performance.md).")
fix("operations/backup.md", "The restore time at 1M objects is to be measured on a quiet machine.",
    "At 1M objects (commits `648d9b0`, `0701a7d`, a shared machine): restore 1.93 s on RocksDB, 57.7 s on PostgreSQL "
    "(see [Benchmarks](../performance.md)).")
fix("cluster.md", "- The rocksdb validator decides **~32k commands/s steady** (1M objects, C1, two shard servers).\n"
    "- Its Python side costs ~30 µs per command per core (`bench.validator.shard_task`: 29.4k/s per core).\n"
    "- Spark's own Kafka→Kafka pass-through runs at ~110k records/s on the same two cores, about 18 µs per command.\n\n"
    "All in, that is ~48 µs of CPU per command, ~21k commands/s per fully busy core. The model below plans executor cores\n"
    "at **~15k commands/s per core** (70 % busy).",
    "- The rocksdb validator decides **20.5k commands/s over a whole run of 1M commands (100k objects), 21.6k/s steady**\n"
    "  (`bench.peer`, main `4407995`, the newest row of [Benchmarks](performance.md)), at **86.5 CPU seconds per 1M\n"
    "  commands** (shard servers 55.8, Spark JVM 27.4, Python workers 3.2): ~87 µs of CPU per command.\n"
    "- The broker ran on the same two cores; it is not in the 86.5 s.\n\n"
    "That is ~11.5k commands/s per fully busy core. The model below plans executor cores\n"
    "at **~8k commands/s per core** (70 % busy).")
fix("cluster.md", "| 10k | 1–2 (one host; the default `./dev run` shape) | 8 | 3 | ~6 MB/s |\n"
    "| 100k | ~8 (2–3 hosts × 4 cores) | 32 | 3–4 | ~55 MB/s |\n"
    "| 1M | ~70 (≈ 18 hosts × 4 cores) | 256 | 8–12 | ~550 MB/s (×3 written with RF 3) |",
    "| 10k | ~2 (one host; the default `./dev run` shape) | 8 | 3 | ~6 MB/s |\n"
    "| 100k | ~13 (3–4 hosts × 4 cores) | 32 | 3–4 | ~55 MB/s |\n"
    "| 1M | ~125 (≈ 32 hosts × 4 cores) | 256 | 8–12 | ~550 MB/s (×3 written with RF 3) |")


def move_supervision(out):
    """The Quick start's **Supervision.** paragraph goes to Operations > Running, as its first section."""
    text = out["getting-started.md"]
    start = text.index("**Supervision.** After start-up")
    end = text.find("\n\n", start)
    end = len(text.rstrip()) if end < 0 else end
    para = text[start:end].replace("**Supervision.** ", "", 1)
    out["getting-started.md"] = text[:start] + "Once it runs, `arbiter run` supervises its components: see " \
        "[Supervision](operations/running.md#supervision)." + text[end:]
    running = out["operations/running.md"]
    first = running.index("\n## ")
    out["operations/running.md"] = running[:first] + "\n## Supervision\n\n" + para + "\n" + running[first:]


def tiers(out):
    """Development: which tier to run while editing and which before pushing."""
    out["development.md"] = out["development.md"].replace("## Tests\n", "## Tests\n\n" + TIERS, 1)


TIERS = TIERS_TEXT
POST.extend([move_supervision, tiers])


def architecture(out):
    """The pipeline page: the diagram and who reads what, before the layout."""
    text = out["concepts/architecture.md"]
    head, rest = text.split("\n", 1)
    out["concepts/architecture.md"] = head + "\n\n" + ARCHITECTURE_TEXT + rest.lstrip("\n")


POST.append(architecture)


# --- snippets: titled, runnable as printed ---------------------------------------------------------------------
fix("consuming.md", """run by
`tests/integration/test_contract_registry.py` as written but for the addresses and topic names:

```python
from confluent_kafka import DeserializingConsumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer

registry = SchemaRegistryClient({"url": "http://127.0.0.1:8000/registry"})
consumer = DeserializingConsumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "my-service",
                                  "auto.offset.reset": "earliest", "value.deserializer": AvroDeserializer(registry)})
consumer.subscribe(["events", "rejections"])
""", """run as printed by
`tests/integration/test_contract_registry.py` (which sets the `ARBITER_*` variables to its broker, registry and
topics; unset, they are the local defaults):

```python title="consumer.py"
import os

from confluent_kafka import DeserializingConsumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer

env = os.environ.get  # Arbiter's own variables, else the local defaults
registry = SchemaRegistryClient({"url": env("ARBITER_SCHEMA_REGISTRY_URL", "http://127.0.0.1:8000/registry")})
consumer = DeserializingConsumer({"bootstrap.servers": env("ARBITER_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
                                  "group.id": "my-service", "auto.offset.reset": "earliest",
                                  "value.deserializer": AvroDeserializer(registry)})
consumer.subscribe([env("ARBITER_TOPIC_EVENTS", "events"), env("ARBITER_TOPIC_REJECTIONS", "rejections")])
""")
fix("concepts/projections.md", "```sql\n-- what alice may read", '```sql title="what alice may read"\n-- what alice may read')
fix("concepts/projections.md", "```sql\n-- live documents per owner",
    '```sql title="documents per owner"\n-- live documents per owner')
fix("operations/archive.md", """Query it with Spark SQL:

```python
spark.read.parquet("var/archive/stream").createOrReplaceTempView("archive")
spark.sql("SELECT topic, count(*) FROM archive GROUP BY topic")
spark.sql("SELECT object_id, version, principal FROM archive WHERE topic = 'events' AND type = 'UPDATED'")
spark.sql("SELECT value FROM archive WHERE topic = 'commands' AND decode_error IS NOT NULL")  # the raw bytes
```
""", """Query it with Spark SQL (the archive's location and topic names are Arbiter's settings, read from the same
variables, with their defaults):

```python title="archive_spark.py"
import os

from pyspark.sql import SparkSession

env = os.environ.get
archive, events = env("ARBITER_ARCHIVE_URI", "var/archive"), env("ARBITER_TOPIC_EVENTS", "events")
spark = SparkSession.builder.getOrCreate()
spark.read.parquet(f"{archive}/stream").createOrReplaceTempView("archive")
spark.sql("SELECT topic, count(*) AS records FROM archive GROUP BY topic ORDER BY topic").show(truncate=False)
spark.sql(f"SELECT object_id, version, principal FROM archive WHERE topic = '{events}' AND type = 'UPDATED'").show()
# records that did not decode: their raw bytes are in `value`
spark.sql("SELECT topic, partition, offset FROM archive WHERE decode_error IS NOT NULL").show(truncate=False)
```
""")
fix("operations/archive.md", """```python
import duckdb
from projections.archived import files
con = duckdb.connect()
con.execute("SELECT topic, count(*) FROM read_parquet($f, hive_partitioning = true) GROUP BY topic",
            {"f": [str(p) for p in files(Path("var/archive"))]}).fetchall()
```
""", """```python title="archive_duckdb.py"
import os
from pathlib import Path

import duckdb

from projections.archived import files

archive = Path(os.environ.get("ARBITER_ARCHIVE_URI", "var/archive"))
con = duckdb.connect()
print(con.execute("SELECT topic, count(*) FROM read_parquet($f, hive_partitioning = true) GROUP BY topic ORDER BY topic",
                  {"f": [str(p) for p in files(archive)]}).fetchall())
```
""")


def site(out):
    out["development.md"] = out["development.md"].rstrip("\n") + "\n\n" + SITE_TEXT


POST.append(site)
fix("operations/running.md", "is exported (the README table)", "is exported (the table of [Metrics](metrics.md))")
fix("operations/backup.md", "no\nlonger holds, see above)", "no\nlonger holds, see \"No silent skips\" in [Projections](../concepts/projections.md))")
fix("operations/erasure.md", "(see Backup and restore)", "(see [Backup and restore](backup.md))")
fix("security.md", "`arbiter load --via kafka`", "`arbiter load --via topic`")
fix("getting-started.md", "./dev test    # the test suite (unit + integration against a real broker and real Spark)\n```\n",
    "./dev test    # the test suite (unit + integration against a real broker and real Spark)\n```\n\n"
    "While editing, `./dev test --fast` runs the unit tier alone (see [Development](development.md#tests)).\n")


def status_picture(out):
    text = out["operations/status-page.md"]
    head, rest = text.split("\n", 1)
    out["operations/status-page.md"] = head + "\n" + (
        "\n![The status page under load: charts of the last 15 minutes, components, flow, validator state, "
        "rejections by reason, lag and hot keys](../status-page.png)\n\n"
        "*The status page under `arbiter load`, 2026-11-23; panels added since (the parking lot, the archive "
        "component) are not in this picture.*\n") + rest


POST.append(status_picture)
# `arbiter token --ttl` is capped at 7 days (trust-tools); the compose stack's metrics token asked for a year, which the
# CLI refuses (found by test_every_arbiter_command_the_docs_print_parses): a week, renewed at each `up`.


# The Python client's example (a section of the clients branch): runnable as printed, with the API's address and a
# token from the environment instead of names the test injected. tests/integration/test_client_live.py must then run
# tests.docs_snippets.snippet("client_example.py") with ARBITER_API_URL and ARBITER_TOKEN set.
fix("clients.md", """<!-- client-example: run by tests/integration/test_client_live.py -->
```python
from arbiter_client import Client, VersionConflict

with Client(API_URL, TOKEN) as arbiter:""", """```python title="client_example.py"
import os

from arbiter_client import Client, VersionConflict

API_URL, TOKEN = os.environ.get("ARBITER_API_URL", "http://127.0.0.1:8000"), os.environ["ARBITER_TOKEN"]
with Client(API_URL, TOKEN) as arbiter:""")


if __name__ == "__main__":
    sys.exit(main())


"""Fetch the Kafka broker and Spark's Kafka connector from Maven Central once, into a git-ignored cache."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from app.errors import SetupError
from app.settings import Settings

MAVEN_SUBDIR = ("build", "maven")
BUNDLES = {"kafka": "kafka-broker.xml", "spark": "spark-kafka.xml"}


def _maven_dir(settings: Settings) -> Path:
    return settings.home.joinpath(*MAVEN_SUBDIR)


def _stamp(settings: Settings, bundle: str) -> str:
    pom = (_maven_dir(settings) / BUNDLES[bundle]).read_bytes()
    return hashlib.sha256(pom).hexdigest()


def bundle_dir(settings: Settings, bundle: str) -> Path:
    return settings.jars_dir / bundle


def fetch(settings: Settings, bundle: str) -> Path:
    """Copy a bundle's jars and their runtime dependencies into the cache; a no-op once done.

    The marker holds the POM's hash, so editing a version in ``build/maven`` refetches, and an
    already-complete cache never touches the network (later runs work offline).
    """
    target = bundle_dir(settings, bundle)
    marker = target / ".complete"
    if marker.exists() and marker.read_text().strip() == _stamp(settings, bundle):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SetupError("Maven ('mvn') is needed once to fetch jars from Maven Central; install it (apt install maven)")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [
        mvn, "-q", "-B", "-s", str(_maven_dir(settings) / "settings.xml"), "-f", str(_maven_dir(settings) / BUNDLES[bundle]),
        "dependency:copy-dependencies", f"-DoutputDirectory={staging}", "-DincludeScope=runtime",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
    if proc.returncode != 0:
        raise SetupError(f"fetching {bundle} jars from Maven Central failed:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    (staging / ".complete").write_text(_stamp(settings, bundle))
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def _artifact(jar: Path) -> str:
    """Name a jar without its version: ``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    parts = jar.stem.split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)


def spark_connector_jars(settings: Settings) -> list[Path]:
    """Jars to add to Spark's classpath: the connector and what pyspark does not already ship."""
    import pyspark

    shipped = {_artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    jars = sorted(fetch(settings, "spark").glob("*.jar"))
    return [j for j in jars if _artifact(j) not in shipped]


def kafka_classpath(settings: Settings) -> str:
    return ":".join(str(j) for j in sorted(fetch(settings, "kafka").glob("*.jar")))

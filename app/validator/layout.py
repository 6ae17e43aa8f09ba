"""What the first run fixed about a checkpoint (backend, partitions, shuffle partitions, state provider); refuse changes."""

from __future__ import annotations

import json

from app.errors import SetupError

LAYOUT_FILE = "arbiter-layout.json"


def _fs_path(spark, uri: str):  # noqa: ANN001, ANN202
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri.rstrip("/") + "/" + LAYOUT_FILE)
    return path.getFileSystem(spark._jsc.hadoopConfiguration()), path


def read_layout(spark, uri: str) -> dict[str, object] | None:  # noqa: ANN001
    """Return the layout stored in checkpoint ``uri`` (any Hadoop URI), or None if there is none yet."""
    fs, path = _fs_path(spark, uri)
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        text = spark._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    return json.loads(text)


def check_layout(spark, uri: str, layout: dict[str, object]) -> None:  # noqa: ANN001
    """Write ``layout`` next to a new checkpoint; for an existing one, raise SetupError naming every changed value."""
    stored = read_layout(spark, uri)
    if stored is None:
        fs, path = _fs_path(spark, uri)
        out = fs.create(path, True)
        try:
            out.write(bytearray(json.dumps(layout, sort_keys=True, indent=1).encode()))
        finally:
            out.close()
        return
    changed = {k: (stored.get(k), v) for k, v in layout.items() if stored.get(k) != v}
    if changed:
        detail = "; ".join(f"{k}: checkpoint has {old!r}, settings say {new!r}" for k, (old, new) in sorted(changed.items()))
        raise SetupError(
            f"checkpoint {uri} was created with a different layout ({detail}). State is sharded by these values, "
            "so they cannot change under an existing checkpoint: restore the original settings, or start from a "
            "new checkpoint location (replaying the commands topic from the beginning)")

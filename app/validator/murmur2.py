"""Kafka's murmur2 key hash, byte for byte as the Java client (and librdkafka's murmur2_random) computes it."""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Return the signed 32-bit murmur2 hash of ``data`` (``org.apache.kafka.common.utils.Utils.murmur2``)."""
    m, mask = _M, _MASK
    length = len(data)
    h = (_SEED ^ length) & mask
    end = length - (length & 3)
    # One unpack for all whole words: the per-word slice + int.from_bytes was most of the hash's cost.
    for k in struct.unpack_from(f"<{end >> 2}I", data):
        k = (k * m) & mask
        k ^= k >> 24
        h = ((h * m) ^ ((k * m) & mask)) & mask
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=1 << 16)
def partition_for(key: bytes, partitions: int) -> int:
    """Return the partition the Java client's default partitioner picks for ``key`` (positive-masked).

    Cached: a Python worker sees the same object ids again and again (within a task and across batches).
    """
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def positive_hashes(keys: Sequence[bytes]) -> np.ndarray:  # type: ignore[type-arg]
    """Return ``murmur2(key) & 0x7FFFFFFF`` for every key at once, as a uint32 array in ``keys``' order.

    The same arithmetic as ``murmur2``, done on whole columns: keys of one length are one matrix of bytes, each
    32-bit word a column, numpy's uint32 products wrapping modulo 2**32 as the ``& mask`` does. For a rescale's
    split, which routes every object of the state twice (old and new count): there ``partition_for`` per key was
    ~40 % of the step (py-spy, 1M objects; docs/benchmarks.md).
    """
    import numpy as np  # here: the API and the Python workers import this module and never need it

    out = np.empty(len(keys), dtype=np.uint32)
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        by_length[len(key)].append(i)
    m = np.uint32(_M)
    for length, rows in by_length.items():
        raw = np.frombuffer(b"".join([keys[i] for i in rows]), dtype=np.uint8).reshape(len(rows), length)
        h = np.full(len(rows), (_SEED ^ length) & _MASK, dtype=np.uint32)
        end = length - (length & 3)
        if end:
            words = np.ascontiguousarray(raw[:, :end]).view("<u4")
            for j in range(end >> 2):
                k = words[:, j] * m
                k ^= k >> np.uint32(24)
                h = (h * m) ^ (k * m)
        rest = length & 3
        if rest == 3:
            h ^= raw[:, end + 2].astype(np.uint32) << np.uint32(16)
        if rest >= 2:
            h ^= raw[:, end + 1].astype(np.uint32) << np.uint32(8)
        if rest >= 1:
            h ^= raw[:, end].astype(np.uint32)
            h = h * m
        h ^= h >> np.uint32(13)
        h = h * m
        h ^= h >> np.uint32(15)
        out[rows] = h & np.uint32(0x7FFFFFFF)
    return out

"""Kafka's murmur2 key hash, byte for byte as the Java client (and librdkafka's murmur2_random) computes it."""

from __future__ import annotations

import struct
from functools import lru_cache

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

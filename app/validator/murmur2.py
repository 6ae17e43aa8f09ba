"""Kafka's murmur2 key hash, byte for byte as the Java client (and librdkafka's murmur2_random) computes it."""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Return the signed 32-bit murmur2 hash of ``data`` (``org.apache.kafka.common.utils.Utils.murmur2``)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length - (length & 3)
    for i in range(0, end, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    """Return the partition the Java client's default partitioner picks for ``key`` (positive-masked)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions

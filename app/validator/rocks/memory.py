"""One RocksDB block cache and memtable budget per process, shared by every shard the process opens."""

from __future__ import annotations

import threading

import rocksdict

_lock = threading.Lock()
_budgets: dict[tuple[int, int], rocksdict.Options] = {}


def shard_options(memory_mb: int, write_buffer_mb: int) -> rocksdict.Options:
    """Return the process-wide options for ``memory_mb`` of block cache with ``write_buffer_mb`` of memtables in it.

    Every shard opened with these options shares one LRU cache and one write-buffer manager charged to that
    cache, so N shards in one process use at most ``memory_mb`` for data blocks, index/filter blocks and
    memtables together, instead of N private budgets (the Kafka Streams lesson in ../shared/LESSONS.md).
    """
    key = (memory_mb, write_buffer_mb)
    with _lock:
        opts = _budgets.get(key)
        if opts is None:
            opts = _budgets[key] = _build(memory_mb, write_buffer_mb)
        return opts


def _build(memory_mb: int, write_buffer_mb: int) -> rocksdict.Options:
    cache = rocksdict.Cache(memory_mb << 20)
    manager = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
        min(write_buffer_mb, memory_mb) << 20, False, cache)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_bloom_filter(10, False)  # most multi-get keys of a busy shard exist; unknown ids skip the disk
    table.set_cache_index_and_filter_blocks(True)  # index and filters count against the budget too
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_block_based_table_factory(table)
    opts.set_write_buffer_manager(manager)
    opts.set_write_buffer_size(min(write_buffer_mb, 32) << 20)
    opts.set_max_write_buffer_number(2)
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    opts.set_max_background_jobs(2)
    opts.set_keep_log_file_num(2)
    return opts

"""Backup and restore (issue 30): cut the read model, the audit store and the validator's checkpoint with every
writer stopped, write a manifest of offsets and file hashes, verify a backup or a restored copy, restore it.

``manifest`` (hashing, the manifest, verify), ``cut`` (``backup create``), ``restore``. May import ``app``'s top,
``app.validator`` (its lock and checkpoint layout), ``app.local`` and ``projections``.
"""

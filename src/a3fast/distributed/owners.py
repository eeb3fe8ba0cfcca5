"""Which shard holds an agent: a stable hash of its name, the same on every machine and every run."""
from __future__ import annotations

import hashlib

__all__ = ["shard_of"]


def shard_of(name: str, shards: int) -> int:
    """The shard that holds agent `name`: BLAKE2b of its UTF-8 bytes, modulo the shard count
    (never Python's salted `hash`)."""
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % shards

"""Declarations kept compressed, for fleets too large to hold every declaration as JSON.

A large fleet's records need each agent's canonical JSON, yet a placement reads one declaration at
most (the chosen agent's), so a bulk-loaded fleet can keep them compressed and expand one on demand.
Declarations of one fleet repeat the same keys, capability names, clearances and tools, which a
general compressor cannot exploit in a 1 KB document on its own but a shared dictionary can:
zstd with a dictionary trained on the fleet's own first declarations keeps the standard workload's
1,112-byte declarations in about 160 bytes (docs/performance.md), where zlib without one keeps
about 410.

An entry is either canonical JSON, which starts with `{`, or a zstd frame of it, which starts with
zstd's magic number (`28 b5 2f fd`): `is_packed` tells them apart without a flag per agent.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np
import numpy.typing as npt
import zstandard

__all__ = ["DeclarationCodec", "BatchPacker", "is_packed", "PACK_FROM_BYTES", "CODEC_NAME"]

#: A bulk load's declarations as the packer sees them: bytes, or None for a line the compiled
#: reader left in its chunk, to be packed from its span there (`BatchPacker.after_chunk`).
Texts = list[Any]

#: A bulk load of at least this many bytes of JSON Lines packs its declarations; a smaller fleet
#: keeps them as JSON (packing costs a few µs per declaration and saves memory only at scale).
PACK_FROM_BYTES = 256 << 20
#: The name of the codec in snapshots (docs/snapshot.md).
CODEC_NAME = "zstd-dictionary"
#: The dictionary: its size, and how many declarations it is trained on.
DICTIONARY_BYTES = 64 << 10
TRAINING_SAMPLES = 1024
LEVEL = 3


def is_packed(entry: bytes) -> bool:
    """True for a zstd frame, False for canonical JSON (an object, so it starts with '{')."""
    return entry[:1] != b"{"


class DeclarationCodec:
    """Packs and unpacks declarations with one zstd dictionary. Packing runs on the thread that
    loads; unpacking may be asked for by `place_many`'s threads, and a zstd context serves one call
    at a time, hence the lock."""

    def __init__(self, dictionary: bytes):
        self.dictionary = bytes(dictionary)
        shared = zstandard.ZstdCompressionDict(self.dictionary)
        shared.precompute_compress(level=LEVEL)
        # no checksum or dictionary id in each frame: the snapshot's CRC covers the bytes, and a
        # fleet has one dictionary; the content size lets a frame be expanded in one allocation
        self._compressor = zstandard.ZstdCompressor(level=LEVEL, dict_data=shared, write_checksum=False,
                                                    write_content_size=True, write_dict_id=False)
        self._decompressor = zstandard.ZstdDecompressor(dict_data=shared)
        self._lock = threading.Lock()

    @classmethod
    def train(cls, declarations: Sequence[bytes]) -> "DeclarationCodec":
        """A codec with a dictionary trained on `declarations` (the fleet's first ones). zstd
        cannot train on a few small samples; then the samples themselves serve as the dictionary
        (zstd's "raw content" dictionary, which it tells from a trained one by its magic)."""
        samples: list[bytes | bytearray | memoryview] = list(declarations[:TRAINING_SAMPLES])
        try:
            return cls(zstandard.train_dictionary(DICTIONARY_BYTES, samples, level=LEVEL).as_bytes())
        except zstandard.ZstdError:
            return cls(b"".join(samples)[-DICTIONARY_BYTES:])

    def pack(self, text: bytes) -> bytes:
        with self._lock:
            return self._compressor.compress(text)

    def pack_many(self, texts: Sequence[bytes]) -> list[bytes]:
        """`pack` of each text, in one call into zstd for all of them (a third faster than one
        call each)."""
        if not texts:
            return []
        with self._lock:
            frames = self._compressor.multi_compress_to_buffer(list(texts))
        return [frames[i].tobytes() for i in range(len(frames))]

    def pack_spans(self, data: bytes, segments: bytes) -> list[bytes]:
        """`pack` of each span of `data` (`segments`: little-endian uint64 (offset, length) pairs),
        in one call into zstd, without a copy of any span."""
        if not segments:
            return []
        with self._lock:
            frames = self._compressor.multi_compress_to_buffer(zstandard.BufferWithSegments(data, segments))
        return [frames[i].tobytes() for i in range(len(frames))]

    def unpack(self, entry: bytes) -> bytes:
        with self._lock:
            return self._decompressor.decompress(entry)


class BatchPacker:
    """Packs a bulk load's declarations chunk by chunk as they are read, on a thread of its own:
    zstd runs without the GIL, so one chunk is packed on a second core while the reader reads the
    next, and the raw JSON of at most two chunks is alive at a time.

    `pack`: True always, False never, None when the load reads at least `PACK_FROM_BYTES` (`size`:
    the source's bytes, or None when unknown, as for a pipe, and then once that much has been
    read). A fleet that already packs keeps its codec (one dictionary per fleet); otherwise the
    codec is trained on the load's first declarations. Use it as a context manager, and call
    `finish` once every chunk is read."""

    def __init__(self, codec: DeclarationCodec | None, pack: bool | None, size: int | None = None):
        self.codec = codec
        if codec is not None:
            pack = True
        elif pack is None and size is not None:
            pack = size >= PACK_FROM_BYTES
        self.pack = pack
        self.packed = 0     # texts before this index are packed, or being packed
        self.counted = 0    # texts before this index are counted in `read`
        self.read = 0       # bytes of declarations read so far
        self._worker: ThreadPoolExecutor | None = None
        self._running: tuple[Future, int, int] | None = None   # (packing, from, to)

    def __enter__(self) -> "BatchPacker":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None

    @property
    def packs_from_spans(self) -> bool:
        """Whether the next chunk's lines can be packed from their spans of the chunk (`after_chunk`'s
        `spans`) rather than copied out first: once packing is decided and the codec trained."""
        return self.pack is True and self.codec is not None

    def after_chunk(self, texts: Texts, chunk: bytes = b"",
                    spans: tuple[npt.NDArray[np.int64], bytes] | None = None) -> None:
        """Start packing the texts read since the last call (and put the previous ones in place).
        `spans`, given only when `packs_from_spans`: the entries of `texts` left as None, whose
        lines are still in `chunk`, and their (offset, length) pairs (`Batch.take_spans`)."""
        if spans is not None and len(spans[0]):
            assert self.packs_from_spans and spans[0][0] >= self.packed, "spans of this chunk only"
            self._submit(self._pack_chunk, texts, chunk, spans)
            return
        if self.pack is False or self.packed == len(texts):
            return
        if self.pack is None:
            self.read += sum(map(len, texts[self.counted:]))
            self.counted = len(texts)
            if self.read < PACK_FROM_BYTES:
                return
            self.pack = True
        if self.codec is None:
            if len(texts) < TRAINING_SAMPLES:
                return      # trained once enough declarations are read, or at `finish`
            self.codec = DeclarationCodec.train(texts[:TRAINING_SAMPLES])
        self._submit(self._pack_texts, texts, b"", None)

    def _submit(self, job: Callable[..., list[bytes]], texts: Texts, chunk: bytes,
                spans: tuple[npt.NDArray[np.int64], bytes] | None) -> None:
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="a3fast-pack")
        self._collect(texts)
        lo, hi = self.packed, len(texts)
        self._running = (self._worker.submit(job, texts[lo:hi], chunk, spans, lo), lo, hi)
        self.packed = hi

    def _pack_texts(self, texts: Texts, chunk: bytes, spans: None, lo: int) -> list[bytes]:
        assert self.codec is not None, "a codec is trained before anything is packed"
        return self.codec.pack_many(texts)

    def _pack_chunk(self, texts: Texts, chunk: bytes,
                    spans: tuple[npt.NDArray[np.int64], bytes], lo: int) -> list[bytes]:
        """Pack entries `lo:lo + len(texts)`: those left as None from their spans of `chunk`, the
        careful reader's (bytes) as they are."""
        assert self.codec is not None, "a codec is trained before anything is packed"
        entries, segments = spans
        frames = self.codec.pack_spans(chunk, segments)
        if len(frames) == len(texts):       # every line of the chunk read by the compiled reader
            return frames
        out: list[Any] = list(texts)
        careful = [k for k, text in enumerate(texts) if text is not None]
        for k, frame in zip(careful, self.codec.pack_many([texts[k] for k in careful])):
            out[k] = frame
        for k, frame in zip((entries - lo).tolist(), frames):
            out[k] = frame
        return out

    def finish(self, texts: Texts) -> None:
        """Pack what is left and put every packed chunk in place: every text read is packed now
        (if any is)."""
        if self.pack is True and self.codec is None and texts:
            self.codec = DeclarationCodec.train(texts[:TRAINING_SAMPLES])
        if self.pack is True and self.packed < len(texts):
            self.after_chunk(texts)
        self._collect(texts)

    def _collect(self, texts: Texts) -> None:
        if self._running is not None:
            running, lo, hi = self._running
            self._running = None
            texts[lo:hi] = running.result()

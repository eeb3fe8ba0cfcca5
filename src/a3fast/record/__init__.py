"""The §6 placement record in every form, written and read in one place each:

- `write`: from a Placement — the scheduling object, rejection content and trace records, as dicts
  and as JSON bytes (the engines write the large lists straight to bytes);
- `read`: spec JSON read for the verifier (§7) into a `RecordedPlacement`;
- `compact`: the compact encoding (docs/compact-format.md) — encoder, decoder, and the one reader
  of a compact member;
- `compact_read`: a compact record read for the verifier into the same `RecordedPlacement`, its
  lists kept as bitmaps.
"""

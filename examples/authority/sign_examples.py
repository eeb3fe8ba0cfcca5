"""Write connection.json and engagement.json of the worked example, signed with the example key.

The experience's Ed25519 key is derived from a fixed phrase so that the files are reproducible
(Ed25519 signatures are deterministic): it is an example key, public by construction, and must
never sign anything real. Run from anywhere: `python examples/authority/sign_examples.py [DIR]`.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from a3fast.authority import public_key_text, sign_engagement

EXAMPLE_KEY = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"a3fast example experience key").digest())
KID = "arena-2026-03"

CONNECTION = {
    "id": "conn-7f3a",
    "experience": "arena.example",
    "agent": {"name": "chess-coach", "namespace": "players"},
    "paired_at": "2026-02-14T09:00:00Z",
    "capabilities": ["game.move.submit", "game.board.read", "game.history.read", "game.chat.send",
                     "game.match.resign", "game.wager.place/2", "engine.position.evaluate"],
    "keys": [{"kid": KID, "alg": "Ed25519", "public_key": public_key_text(EXAMPLE_KEY)}],
}

ENGAGEMENT = {
    "experience": "arena.example",
    "context": "ranked-match-4471",
    "connection": "conn-7f3a",
    "capabilities": ["game.move.submit", "game.board.read", "game.history.read", "game.match.resign",
                     "game.wager.place/2", "game.spectators.invite", "engine.position.evaluate"],
    "issued_at": "2026-03-01T12:00:00Z",
    "expires": "2026-03-01T14:00:00Z",
}


def write(directory: Path) -> None:
    for name, doc in (("connection.json", CONNECTION),
                      ("engagement.json", sign_engagement(ENGAGEMENT, EXAMPLE_KEY, KID))):
        (directory / name).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)

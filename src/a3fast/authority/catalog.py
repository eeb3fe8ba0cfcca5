"""The contract catalogue as bitsets: which capabilities have each operation, effect, data class,
resource and reversibility, so that a runtime rule's matches are a few bitset operations.

Bit `i` of every set is the capability the catalogue's `Vocabulary` interned as `i`. A rule's
conditions are ANDed; the alternatives listed in one condition are ORed (portable-authority
"Effects and data": the qualifiers are what local policy reasons over).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping

from .documents import Contract, Rule
from .vocabulary import Vocabulary

__all__ = ["Catalog"]


def _union(index: Mapping[str, int], values: Iterable[str]) -> int:
    out = 0
    for value in values:
        out |= index.get(value, 0)
    return out


class Catalog:
    """Contracts by capability key, with one bitset per qualifier value.

    A contract that does not state `reversible` counts as irreversible: a rule that guards
    irreversible actions must not be escaped by saying nothing. A contract marked `trusted: false`
    (a draft inferred from a tool's self-description, such as MCP annotations) needs a person to
    confirm each use: hints a tool gives about itself must not widen what runs unattended.
    """

    def __init__(self, contracts: Iterable[Contract], vocabulary: Vocabulary | None = None) -> None:
        self.vocabulary = vocabulary if vocabulary is not None else Vocabulary()
        self.contracts: dict[str, Contract] = {}
        by_operation: dict[str, int] = defaultdict(int)
        by_resource: dict[str, int] = defaultdict(int)
        by_effect: dict[str, int] = defaultdict(int)
        by_data_class: dict[str, int] = defaultdict(int)
        known = reversible = always = untrusted = 0
        for contract in contracts:
            if contract.key in self.contracts:
                # two contracts' qualifiers would be merged into one capability's bits (one
                # reversible, the other not: a deny on irreversible actions escaped)
                raise ValueError(f"contracts: {contract.key!r} given twice; one contract per id and major version")
            bit = 1 << self.vocabulary.intern(contract.key)
            self.contracts[contract.key] = contract
            known |= bit
            by_operation[contract.operation] |= bit
            by_resource[contract.resource] |= bit
            for effect in contract.effects:
                by_effect[effect] |= bit
            for data_class in contract.data_classes:
                by_data_class[data_class] |= bit
            if contract.reversible:
                reversible |= bit
            if contract.confirmation == "always":
                always |= bit
            if contract.doc.get("trusted") is False:
                untrusted |= bit
        self.known = known
        self.reversible = reversible
        self.untrusted = untrusted
        self.always_confirm = always | untrusted
        self._index = {"operation": dict(by_operation), "resource": dict(by_resource),
                       "effects": dict(by_effect), "data_classes": dict(by_data_class)}

    def contract_of(self, bit: int) -> Contract:
        """The contract of the capability whose bit is `bit`."""
        return self.contracts[self.vocabulary.key(bit.bit_length() - 1)]

    def get(self, key: str) -> Contract | None:
        return self.contracts.get(key)

    def __len__(self) -> int:
        return len(self.contracts)

    def matches(self, rule: Rule) -> int:
        """The contracted capabilities that meet every condition of `rule`."""
        out = self.known
        for condition, index in self._index.items():
            values = getattr(rule, condition)
            if values is not None:
                out &= _union(index, values)
        if rule.capabilities is not None:
            wanted = 0
            for key in rule.capabilities:
                cid = self.vocabulary.get(key)
                if cid is not None:
                    wanted |= 1 << cid
            out &= wanted
        if rule.reversible is not None:
            out &= self.reversible if rule.reversible else ~self.reversible
        return out

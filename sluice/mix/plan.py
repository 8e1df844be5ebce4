"""Which documents a mix takes, how often, and where each copy goes in the token stream.

Every rule here is a function of a document's id hash and the mix config, evaluated on numpy columns, so a
mix is planned from histograms and re-derived chunk by chunk (bounded memory, no per-document objects):

- **Targets**: the token budget is split by weight exactly (largest remainder).
- **Validation**: a document is held out when its id hash falls in the first `validation_share` of the hash
  range (the same documents for every mix and rebuild).
- **Selection**: component c has `available` training tokens and needs `target`; E = target / available
  epochs (<= max_epochs). Every document is taken floor(E) times whole; the fractional epoch takes documents
  in increasing order of their draw u = splitmix64(doc_hash ^ key(seed, component)) until the target is met
  exactly, the last one cut (its head kept). The draw threshold is found from a token histogram of u's top
  16 bits plus an exact sort of the one boundary bin.
- **Placement**: copy e of a document gets the stream key (e + u / 2^64) / E in [0, 1); the stream is all
  copies of all components in key order. Each component is spread evenly over the stream (each epoch's copies
  fill their 1/E of the key range, the fractional epoch, chosen by small u, fills the rest), and the copies
  of one document are 1/E of the stream apart (`sluice.mix.order` enforces that no two share a sample).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from sluice.mix.permutation import _key, splitmix64

HIST_BITS = 16
HIST_BINS = 1 << HIST_BITS
_HASH_RANGE = float(1 << 64)


class MixError(ValueError):
    """A mix that cannot be built as configured (missing data, weight beyond the epoch cap, tokenizer mismatch)."""


def targets(weights: dict[str, float], budget: int) -> dict[str, int]:
    """Split the budget by weight, exactly (largest remainder), in a deterministic order."""
    total = sum(weights.values())
    names = sorted(weights)
    exact = {name: budget * weights[name] / total for name in names}
    out = {name: int(np.floor(exact[name])) for name in names}
    leftover = budget - sum(out.values())
    for name in sorted(names, key=lambda n: (-(exact[n] - out[n]), n))[:leftover]:
        out[name] += 1
    return out


def validation_threshold(share: float) -> np.uint64:
    """Documents whose id hash is below this are held out (0 holds out none)."""
    if share <= 0:
        return np.uint64(0)
    return np.uint64(min(share * _HASH_RANGE, _HASH_RANGE - 1))


def validation_mask(doc_hash: np.ndarray, share: float) -> np.ndarray:
    return doc_hash < validation_threshold(share)


def component_key(seed: int, name: str) -> np.uint64:
    return np.uint64(_key(seed, zlib.crc32(name.encode())))


def draws(doc_hash: np.ndarray, key: np.uint64 | np.ndarray) -> np.ndarray:
    """Each document's uniform 64-bit draw for its component (the fractional-epoch order and the stream key)."""
    return splitmix64(np.asarray(doc_hash, np.uint64) ^ key)


def validation_keys(doc_hash: np.ndarray, seed: int) -> np.ndarray:
    """Stream keys of validation documents: a seeded shuffle, each document once."""
    return draws(doc_hash, np.uint64(_key(seed, 0x76616C))).astype(np.float64) / _HASH_RANGE


@dataclass
class ComponentPlan:
    """How one component meets its target: whole epochs, then documents with a draw below the cut."""

    name: str
    target: int
    available_tokens: int
    available_documents: int
    full_epochs: int = 0
    boundary_bin: int = -1  # documents in lower bins are in the fractional epoch; -1: no fractional epoch
    cut: tuple[int, int, int] = (0, 0, 0)  # (u, shard, doc) of the last document of the fractional epoch
    cut_length: int = 0  # tokens of that document kept
    ranges: int = 0  # copies in the stream

    @property
    def epochs(self) -> float:
        return self.target / self.available_tokens if self.available_tokens else 0.0

    def check(self, max_epochs: float) -> None:
        if self.target == 0:
            return
        if self.available_tokens == 0:
            raise MixError(f"source {self.name!r} has no tokenized training documents, but the mix needs {self.target} tokens of it")
        if self.epochs > max_epochs:
            raise MixError(
                f"source {self.name!r}: the weight asks for {self.target} tokens but it has {self.available_tokens}; that is "
                f"{self.epochs:.2f} epochs, above max_epochs={max_epochs}. Lower its weight or the token budget, "
                "raise max_epochs, or add data"
            )

    def fractional_tokens(self) -> int:
        return self.target - self.full_epochs * self.available_tokens

    def in_fraction(self, u: np.ndarray, shard: np.ndarray, doc: np.ndarray) -> np.ndarray:
        """Which documents the fractional epoch takes (draw order, ties broken by shard and document)."""
        if self.boundary_bin < 0:
            return np.zeros(len(u), bool)
        bins = (u >> np.uint64(64 - HIST_BITS)).astype(np.int64)
        cu, cs, cd = (np.uint64(self.cut[0]), self.cut[1], self.cut[2])
        at_cut = (u < cu) | ((u == cu) & ((shard < cs) | ((shard == cs) & (doc <= cd))))
        return (bins < self.boundary_bin) | ((bins == self.boundary_bin) & at_cut)

    def is_cut(self, u: np.ndarray, shard: np.ndarray, doc: np.ndarray) -> np.ndarray:
        if self.boundary_bin < 0:
            return np.zeros(len(u), bool)
        return (u == np.uint64(self.cut[0])) & (shard == self.cut[1]) & (doc == self.cut[2])


def plan_component(name: str, target: int, tokens: int, documents: int, token_hist: np.ndarray, count_hist: np.ndarray) -> ComponentPlan:
    """Whole epochs and the boundary bin of the fractional epoch, from the component's draw histograms."""
    plan = ComponentPlan(name, target, tokens, documents)
    if target == 0 or tokens == 0:
        return plan
    plan.full_epochs = target // tokens
    remaining = plan.fractional_tokens()
    plan.ranges = plan.full_epochs * documents
    if remaining > 0:
        cumulative = np.cumsum(token_hist)
        plan.boundary_bin = int(np.searchsorted(cumulative, remaining, side="left"))
    return plan


def settle_cut(plan: ComponentPlan, token_hist: np.ndarray, count_hist: np.ndarray, u: np.ndarray, shard: np.ndarray, doc: np.ndarray, length: np.ndarray) -> None:
    """Fix the exact last document of the fractional epoch from the documents of the boundary bin."""
    below = int(token_hist[: plan.boundary_bin].sum())
    need = plan.fractional_tokens() - below
    order = np.lexsort((doc, shard, u))
    cumulative = np.cumsum(length[order].astype(np.int64))
    last = int(np.searchsorted(cumulative, need, side="left"))
    if last >= len(order):
        raise MixError(f"component {plan.name!r}: its draw histogram disagrees with its documents (internal error)")
    chosen = order[last]
    plan.cut = (int(u[chosen]), int(shard[chosen]), int(doc[chosen]))
    plan.cut_length = int(need - (cumulative[last - 1] if last else 0))
    plan.ranges += int(count_hist[: plan.boundary_bin].sum()) + last + 1


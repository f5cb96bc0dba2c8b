"""The pure rules of the protocol: no I/O, no clock, no Trio.

- :func:`claim_candidates` — which splits this worker *may* act on, and how (which kind of
  claim, and whether that claim would exhaust the split's attempts and so must quarantine it).
- :func:`attempts_after` — the attempt rule (fair blame): what each end of a tenancy charges.
- :func:`stable_hash_str`, :func:`stable_hash`, :func:`jitter` — the only hashing and
  randomness the rules use (blake2b, stable across platforms and Python versions).

The leader's placement is :mod:`spate._core.placement.index`.

Everything here is deterministic in its arguments, which is what the property tests pin.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Collection, Iterable
from typing import Literal

import attrs

from spate._core.records import Status

__all__ = [
    "FAIL",
    "Candidate",
    "ClaimKind",
    "SplitFacts",
    "attempts_after",
    "claim_candidates",
    "exhausts_attempts",
    "fingerprint_hash",
    "jitter",
    "live_workers",
    "stable_hash",
    "stable_hash_str",
]

_MASK64 = (1 << 64) - 1


def stable_hash(seed: int, value: int) -> int:
    """A 64-bit hash of an integer, seeded; identical on every platform and Python version."""
    data = (value & _MASK64).to_bytes(8, "big")
    key = (seed & _MASK64).to_bytes(8, "big")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, key=key).digest(), "big")


def stable_hash_str(seed: int, text: str) -> int:
    """A 64-bit hash of a string, seeded; identical on every platform and Python version."""
    key = (seed & _MASK64).to_bytes(8, "big")
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8, key=key).digest(), "big")


def fingerprint_hash(fingerprint: str) -> int:
    """The job's tie-break seed, derived from the fingerprint alone.

    Never from the leader's identity: a leader-specific seed would re-break every tie at
    each failover and move splits for nothing.
    """
    return stable_hash_str(0, fingerprint)


def jitter(seed: int, round_: int, base: float) -> float:
    """``base`` scaled into [0.8, 1.2) by a hash of ``(seed, round_)``, in 1024 steps.

    Workers started together would otherwise renew in lockstep and hit the store in bursts.
    """
    h = stable_hash(seed, round_) % 1024
    return base * (0.8 + 0.4 * h / 1024)


def live_workers(presence: Collection[str], instance: str) -> int:
    """Number of live workers, counting this one even before its presence key is seen."""
    return len(presence) + (0 if instance in presence else 1)


class ClaimKind(enum.Enum):
    """How a split comes to be claimed, in priority order (lower claims first)."""

    CREATE = 0
    """Never owned: no lease, no owner, epoch 0."""
    RELEASED = 1
    """Handed back cleanly (owner cleared): no lease, no owner, epoch > 0."""
    RECLAIM = 2
    """A live lease in this worker's own name: a restarted predecessor with the same id."""
    EXPIRED = 3
    """The owner died: no lease, but the record still names an owner."""

    @property
    def consumes_attempt(self) -> bool:
        """Whether this claim ends a tenancy non-gracefully.

        It then counts an attempt when that tenancy advanced nothing: see
        :func:`attempts_after`.
        """
        return self in (ClaimKind.RECLAIM, ClaimKind.EXPIRED)


@attrs.frozen
class SplitFacts:
    """What :func:`claim_candidates` needs to know about one split."""

    status: Status
    owner: str | None
    epoch: int
    attempts: int
    lease_owner: str | None
    """Owner named by the live lease, or None when no lease is live."""
    has_spec: bool
    advanced: bool = False
    """Whether the last tenancy moved the watermark (its death then charges no attempt)."""


FAIL: Literal["fail"] = "fail"
"""The end of a tenancy by an explicit ``fail`` (not a claim): see :func:`attempts_after`."""


def attempts_after(end: ClaimKind | Literal["fail"], attempts: int, advanced: bool) -> int:
    """A split's attempt count once the end of its tenancy is charged: the fair-blame rule.

    ``end`` is how the tenancy ended, as the next claim finds it (a :class:`ClaimKind`), or
    :data:`FAIL`; ``attempts`` and ``advanced`` are the freshest progress record's. An explicit
    ``fail`` always charges one. Of the claims, only a takeover from a dead owner (an expiry,
    or a restarted predecessor reclaiming its own lease) is a candidate, and only when that
    owner's tenancy moved the watermark not at all: a crash-looping split dies before it
    commits, while a healthy split on a crashing worker keeps moving forward and must never be
    quarantined for its hosts' deaths. Graceful claims (never owned, handed back) never charge.
    """
    if not isinstance(end, ClaimKind):
        return attempts + 1  # FAIL
    return attempts + int(end.consumes_attempt and not advanced)


def exhausts_attempts(
    end: ClaimKind | Literal["fail"], attempts: int, advanced: bool, max_attempts: int
) -> bool:
    """Whether charging ``end`` (see :func:`attempts_after`) reaches ``max_attempts``.

    The split is then quarantined instead. An end charged nothing never quarantines, even on a
    record already at the cap: only a charged end is evidence of poison.
    """
    after = attempts_after(end, attempts, advanced)
    return after > attempts and after >= max_attempts


@attrs.frozen
class Candidate:
    """A split this worker may act on: claim it, or (out of attempts) quarantine it."""

    split: str
    kind: ClaimKind
    quarantine: bool
    """True when this claim would reach ``max_attempts``: park the split instead."""


def claim_candidates(
    splits: Iterable[tuple[str, SplitFacts]],
    *,
    held: Collection[str],
    instance: str,
    max_attempts: int,
) -> list[Candidate]:
    """Every split this worker may act on, ordered by (kind priority, split id).

    Whether it *should* claim is the assignment's call; quarantines need no assignment.
    Graceful kinds never quarantine: a clean hand-back is no evidence of poison.
    """
    out: list[Candidate] = []
    for split, facts in splits:
        if facts.status is not Status.RUNNABLE or split in held:
            continue
        if facts.lease_owner is not None:
            if facts.lease_owner != instance:
                continue  # a live foreign lease: someone holds it
            kind = ClaimKind.RECLAIM
        elif facts.owner is None:
            kind = ClaimKind.CREATE if facts.epoch == 0 else ClaimKind.RELEASED
        else:
            kind = ClaimKind.EXPIRED
        if exhausts_attempts(kind, facts.attempts, facts.advanced, max_attempts):
            # Quarantine writes only the progress record, so it needs no spec.
            out.append(Candidate(split, kind, quarantine=True))
        elif facts.has_spec:
            out.append(Candidate(split, kind, quarantine=False))
    out.sort(key=lambda c: (c.kind.value, c.split))
    return out

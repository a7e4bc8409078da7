"""The verdict the claims table gives ``claim_id`` on a measurement: what the falsification
tests (tests/test_claims_*.py) compare with and without the effect. ``fails`` is their one
requirement: with the effect removed the verdict is "does not hold here"; a wall-clock
verdict from a busy machine ("not measurable here", ``verdicts.busy_unjudged``) is a visible
skip with the machine's reason, never a pass."""
from __future__ import annotations

import pytest

from inferlab.lab import claims
from inferlab.lab.verdicts import BUSY_REASON, FAILS, MEASURED, UNMEASURABLE


def assessed(claim_id: str, data: dict):
    claim = next(c for c in claims.CLAIMS if c.id == claim_id)
    assert claim.kind == MEASURED, claim_id
    return claim.assess(data)


def verdict(claim_id: str, data: dict) -> str:
    return assessed(claim_id, data).verdict


def fails(claim_id: str, data: dict) -> None:
    """``claim_id`` does not hold on ``data``; skipped (visibly) where its wall-clock numbers
    come from a busy machine."""
    v = assessed(claim_id, data)
    if v.verdict == UNMEASURABLE and v.reason.startswith(BUSY_REASON):
        pytest.skip(f"{claim_id} not judged: {v.warning}")
    assert v.verdict == FAILS, f"{claim_id}: {v.verdict}: {v.reason}"

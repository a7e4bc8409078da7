"""The verdict the claims table gives ``claim_id`` on a measurement: what the falsification
tests (tests/test_claims_*.py) compare with and without the effect."""
from __future__ import annotations

from inferlab.lab import claims
from inferlab.lab.verdicts import MEASURED


def verdict(claim_id: str, data: dict) -> str:
    claim = next(c for c in claims.CLAIMS if c.id == claim_id)
    assert claim.kind == MEASURED, claim_id
    return claim.assess(data).verdict

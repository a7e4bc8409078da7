"""Two tiers of tests (DESIGN.md, Tests), as transformers' RUN_SLOW and vLLM's fast-check jobs.

    make test        pytest                       the default tier: every user-facing promise once
    make test-all    INFERLAB_TIER=all pytest     everything
    .ci/run          INFERLAB_TIER=full:K/N ...   the full tier's shard K of N (0 <= K < N) only

A test in the full tier only carries ``@pytest.mark.full("tests/test_x.py::test_y")``: its
argument names the default-tier test that still proves the promise on every run. A chapter
notebook in the full tier is named in ``FULL_NOTEBOOKS`` below, with its default-tier test.
tests/test_tiers.py checks that every named test exists and is in the default tier, and that
the shards cover the full tier, each test once.

Shards are whole files (a module's fixtures, a JupyterLab or an engine, start once), dealt in
turn from the files ordered by name, so each shard holds about a quarter of the files.
"""
from __future__ import annotations

import os

import pytest

ENV = "INFERLAB_TIER"
ALL_ITEMS = pytest.StashKey[list]()        # every collected item, before the tier's selection
SHARDS = 4                                  # .ci/run's rotation

# chapter notebooks that measure beyond what the default tier's tests already measured
# -> the default-tier test that proves the same promise
FULL_NOTEBOOKS: dict[str, str] = {
    "02_tokenization.ipynb":
        "tests/test_claims_tokenizers.py::"
        "test_with_two_tokenizers_the_counts_differ_and_the_claim_holds",
    "03_prefill_decode.ipynb":
        "tests/test_chapters_content.py::test_ch03_fit_recovers_fixed_and_per_token_cost",
    "12_on_vllm.ipynb": "tests/test_connect_plugin.py::test_the_plugin_in_vllms_venv",
    "14_your_own_traffic.ipynb":
        "tests/test_chapters_content.py::"
        "test_ch14_agent_rounds_resend_the_conversation_and_reuse_its_prefix",
    "15_memory_and_price.ipynb":
        "tests/test_claims_ch15.py::test_15_memory_of_a_tiny_model_is_not_its_weights_and_kv",
}


def covered_by(item) -> str | None:
    """The default-tier test named by a full-tier item (None: the item is in the default tier)."""
    mark = item.get_closest_marker("full")
    if mark is not None:
        if not mark.args or not isinstance(mark.args[0], str):
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.full needs the default-tier "
                                    "test that still covers its promise, as a node id")
        return mark.args[0]
    path = item.nodeid.split("::")[0]
    if path.startswith("notebooks/"):
        return FULL_NOTEBOOKS.get(path.rsplit("/", 1)[-1])
    return None


def parse(value: str | None) -> tuple[str, int, int]:
    """INFERLAB_TIER: '' or 'default', 'all', or 'full:K/N' -> (tier, K, N)."""
    value = (value or "default").strip()
    if value in ("default", "all", "full"):
        return value, 0, 1
    if value.startswith("full:"):
        try:
            k, n = (int(x) for x in value[5:].split("/"))
        except ValueError:
            k, n = -1, 0
        if 0 <= k < n:
            return "full", k, n
    raise pytest.UsageError(f"{ENV}={value!r}: use 'default', 'all', 'full' or 'full:K/N' "
                            "with 0 <= K < N (the full tier's shard K of N)")


def shard_of(path: str, files: list[str], n: int) -> int:
    """The shard of a test file: the files in name order, dealt in turn to n shards."""
    return sorted(set(files)).index(path) % n


def full_tier(items) -> list:
    return [i for i in items if covered_by(i) is not None]


def shard(items, k: int, n: int) -> list:
    full = full_tier(items)
    files = [i.nodeid.split("::")[0] for i in full]
    return [i for i, f in zip(full, files) if shard_of(f, files, n) == k]


def select(config, items) -> None:
    """Keep the tier's items; the rest are reported as deselected."""
    tier, k, n = parse(os.environ.get(ENV))
    config.stash[ALL_ITEMS] = list(items)
    for i in items:
        covered_by(i)                       # a bare @pytest.mark.full fails collection
    if tier == "all":
        return
    keep = (set(map(id, shard(items, k, n))) if tier == "full"
            else {id(i) for i in items if covered_by(i) is None})
    drop = [i for i in items if id(i) not in keep]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if id(i) in keep]


def header(config) -> str:
    tier, k, n = parse(os.environ.get(ENV))
    what = {"default": "default (make test; INFERLAB_TIER=all runs the full tier too)",
            "all": "all (default + full)"}.get(tier) or f"full tier, shard {k} of {n}"
    return f"inferlab test tier: {what}"

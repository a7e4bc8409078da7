"""inferlab serve soaked (issue 45 item 3): 20 asyncio clients on 127.0.0.1, bounded in time
and count, mixed chat and completions, streamed or whole, n up to 3, stop strings, greedy or
seeded, 20% of the streams abandoned after their first chunks (inferlab.bench.serve_soak).

Afterwards: no request errored, the server is idle, 0 KV blocks and 0 requests held, the RSS
within 10% of its level after warm-up, and every greedy answer equal to the engine's own
answer to the same prompt. The default tier runs 30 s on the tiny model; the full tier 5
minutes on SmolLM2. The durations bound the run; nothing here asserts one.
"""
from __future__ import annotations

import pytest

import inferlab as il
import inferlab.serve
from inferlab.bench.serve_soak import SoakConfig, run
from serve_fixtures import *  # noqa: F401,F403 (fixtures and helpers)


def check(res: dict, cfg: SoakConfig, eng) -> None:
    c = res["counts"]
    print("soak:", {k: v for k, v in res.items() if k not in ("config",)})
    assert c["errored"] == 0, res["errors"]
    assert c["completed"] >= cfg.clients and c["abandoned"] > 0, c
    assert c["sent"] == c["completed"] + c["abandoned"] + c["errored"]
    assert res["idle"] and res["left"] == {"kv_blocks_used": 0, "running": 0, "waiting": 0,
                                           "open_jobs": 0}, res["left"]
    assert all(r == 0 for r in eng.kv.pool.ref_cnt)
    assert res["rss"]["after_warmup"] and abs(res["rss"]["growth"]) <= 0.10, res["rss"]
    g = res["greedy"]
    assert g["keys"] > 0 and g["mismatched"] == 0, g["examples"]


def test_soak_30s_tiny(srv, eng, ref, rec):
    cfg = SoakConfig(clients=20, duration_s=30, abandon_share=0.2, seed=0, warmup_s=10,
                     max_tokens=12)
    aborted = len(rec.aborted)
    res = run(srv, cfg, reference=ref)
    check(res, cfg, eng)
    assert len(rec.aborted) > aborted          # the abandoned streams were aborted
    assert rec.max_batch > 1                   # the clients shared engine steps


@pytest.mark.full("tests/test_serve_soak.py::test_soak_30s_tiny")
def test_soak_5min_smollm2():
    eng = il.Engine(max_num_seqs=32)
    srv = inferlab.serve.start(eng, port=0)
    cfg = SoakConfig(clients=20, duration_s=300, abandon_share=0.2, seed=0, warmup_s=60,
                     max_tokens=24)
    try:
        res = run(srv, cfg)                    # greedy answers: the engine itself, after
    finally:
        srv.stop()
    check(res, cfg, eng)

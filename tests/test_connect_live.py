"""The lab's views on a real vLLM server (vLLM 0.32.0 CPU build, .venv-vllm): `inferlab vllm
serve`'s server started, four requests sharing a prefix sent through its streaming API, the
run recorded into a Trace whose requests, tokens and stored blocks match what was sent, the
views built from it, and the server's whole process group gone after.
"""
import os

import pytest

from inferlab.bench.vllm import model_dir_for_vllm
from inferlab.connect.feeds.prefix_tree import TreeState
from inferlab.connect.front import launcher as srv_mod
from inferlab.connect.front import machine
from inferlab.connect.front.launcher import VllmServer
from inferlab.connect.front.machine import VllmServerError
from inferlab.observe.trace import Trace

SHARED = ("You are a careful assistant in a lab about serving language models. The lab shows how "
          "an inference engine keeps the keys and values of every prompt in a paged cache, how "
          "blocks of a shared beginning are found again by their hash, and how a scheduler "
          "batches many requests step by step. Answer in one short sentence. The user asks: ")
TAILS = ["What is the capital of France, which river runs through it, why did the city grow "
         "where it did, and what is it best known for among travellers today?",
         "Why does the moon show phases, how long does a full cycle take from one new moon to "
         "the next, and why do we always see the same face of it?",
         "How is green tea made differently from black tea, which of the two usually holds "
         "more caffeine per cup, and how hot should the water be for each?",
         "Why is the sky blue during the day but red and orange at sunset, explained in words "
         "a child would follow, with one simple experiment to try at home?"]
NEW_TOKENS = 12


def processes_mentioning(text: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        out.append(int(d))
            except OSError:
                pass
    return out


@pytest.mark.full("tests/test_connect_plugin.py::test_the_plugin_in_vllms_venv")
@pytest.mark.vllm
@pytest.mark.slow
def test_a_live_vllm_server_recorded_and_replayed(smollm2, tmp_path):
    from inferlab.widgets import SchedulerTimeline, TokenStream
    from inferlab.widgets.vllm_kv import VllmPrefixCache
    try:
        machine.vllm_python()
    except VllmServerError as e:
        pytest.fail(str(e))
    srv = VllmServer(model_dir_for_vllm(smollm2, str(tmp_path)), port=None, max_model_len=1024,
                     model_name="SmolLM2-135M-Instruct")
    with srv:
        run_dir = srv.run_dir
        conn = srv.connector().connect(timeout=30)
        try:
            assert conn.num_blocks > 1 and conn.block_size == 32
            assert conn.model_name == "SmolLM2-135M-Instruct"
            trace = conn.record()
            live = VllmPrefixCache(conn)
            first = conn.generate([SHARED + TAILS[0]], NEW_TOKENS, ignore_eos=True)
            rest = conn.generate([SHARED + t for t in TAILS[1:]], NEW_TOKENS, ignore_eos=True)
            conn.wait(settle=1.5)
            live.detach()
            trace.stop()
        finally:
            conn.close()
    assert not srv.alive and not srv_mod._group_alive(srv.proc.pid)
    assert processes_mentioning(run_dir) == []

    results = first + rest
    assert all(r.error is None and r.finish_reason == "length" for r in results)
    assert not conn.warnings, conn.warnings
    # requests and tokens: what was sent and what came back
    assert sorted(trace.requests) == sorted(r.request_id for r in results)
    assert {k: v["prompt_len"] for k, v in trace.requests.items()} == \
        {r.request_id: len(r.prompt_token_ids) for r in results}
    got = {}
    for rec in trace.records:
        for e in rec.emitted:
            got.setdefault(e.request_id, []).append(e.token_id)
    assert got == {r.request_id: r.token_ids for r in results}
    assert all(len(r.token_ids) == NEW_TOKENS for r in results)
    # stored blocks: every full block of prompt + computed output, once (only full blocks)
    bs = 32
    expected = set()
    for r in results:
        seq = r.prompt_token_ids + r.token_ids[:-1]
        expected |= {tuple(seq[:(k + 1) * bs]) for k in range(len(seq) // bs)}
    st = TreeState(1)
    for rec in trace.records:
        st.fold(rec.kv_events)
    assert len(st.parent) == conn.tree.num_stored == len(expected)
    # prefix hits: the later three found the shared blocks, and the records say so
    assert results[0].cached_tokens == 0 and all(r.cached_tokens >= 64 for r in rest)
    cached = {c.request_id: c.num_cached for rec in trace.records for c in rec.batch
              if c.kind == "prefill" and c.samples}
    assert cached == {r.request_id: r.cached_tokens for r in results}
    # the views, from the recording and after a save/load
    back = Trace.load(trace.save(tmp_path / "vllm.trace.json"))
    tl, ts, kv = SchedulerTimeline(back), TokenStream(back), VllmPrefixCache(back)
    assert len(tl._lb.order) == 4 and len(tl.segments()) >= 8
    assert sum(len(r["times"]) for r in ts.rows()) == 4 * NEW_TOKENS
    assert kv.summary["stored"] == len(expected) and kv.summary["shared"] >= 1
    assert kv.summary["hit_tokens"] == sum(r.cached_tokens for r in results)
    assert live.summary["stored"] == len(expected)
    for v in (tl, ts, kv):
        assert len(v.figure().data) >= 1

"""The vLLM connector end to end against a fake vLLM server (tests/fixtures/vllm_fake.py: the
OpenAI streaming API, KV events over ZMQ with replay, inferlab's step reports), driven step by
step by the test. Good runs give the same records our engine publishes; bad input (malformed
frames, unknown events, lost / out-of-order / late-joined sequence numbers, lost reports, a
server without the plugin, one that dies) gives a clear warning, shown in the view, and the
records so far stay. No vLLM needed.
"""
import importlib.util
import pathlib
import shutil
import tempfile
import time

import msgspec
import pytest

from inferlab.connect import ConnectError, VllmConnector
from inferlab.connect.feeds.prefix_tree import KV_IDS, TreeState
from inferlab.connect.front import connector as conn_mod
from inferlab.observe.trace import Trace
from waiting import wait_until

spec = importlib.util.spec_from_file_location(
    "vllm_fake", pathlib.Path(__file__).parent / "fixtures" / "vllm_fake.py")
vllm_fake = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vllm_fake)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
SHARED = list(range(1, 11))                       # 10 tokens: 2 full blocks of 4


@pytest.fixture
def short_dir():
    d = tempfile.mkdtemp(prefix="ilv")           # ipc:// paths must stay short
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def make(short_dir):
    made = []

    def _make(replay=True, steps=True, connect=True, **kw):
        fake = vllm_fake.FakeVllm(short_dir, replay=replay, **kw)
        conn = VllmConnector(fake.url, kv=[fake.kv_ep],
                             replay=[fake.replay_ep] if fake.replay_ep else [],
                             steps=[fake.steps_ep] if steps else [])
        made.append((fake, conn))
        if connect:
            conn.connect(timeout=3)
        return fake, conn
    yield _make
    for fake, conn in made:
        conn.close()
        fake.close()


def run_workload(fake, conn, new_tokens=4):
    """One request, then three sharing its prefix (their prefill finds it cached)."""
    first = conn.submit(SHARED + [50, 51, 52, 53, 54, 55], new_tokens)
    fake.run(1)
    # their own third block is computed (and stored) in the step that admits them: it must
    # not count as a hit
    rest = [conn.submit(SHARED + [60 + i, 61, 62, 63, 64, 65], new_tokens) for i in range(3)]
    fake.run(3)
    assert conn.streams.wait(timeout=5)
    wait_until(lambda: not conn.assembler.open and not conn.assembler.orphans, 5)
    time.sleep(0.1)
    return [first] + rest


def test_the_records_match_what_was_sent(make):
    fake, conn = make()
    trace = Trace.record(conn)
    assert trace.meta["clock"] == "wall (vLLM)" and trace.meta["model"] == "fake"
    assert trace.meta["config"]["kv_ids"] == KV_IDS and trace.meta["num_blocks"] == 32
    rids = run_workload(fake, conn)
    res = conn.results
    assert sorted(trace.requests) == sorted(rids)
    assert all(trace.requests[r]["prompt_len"] == 16 for r in rids)
    tokens = {}
    for rec in trace.records:
        assert rec.clock == "wall (vLLM)" and rec.t_start <= rec.t_end
        for e in rec.emitted:
            tokens.setdefault(e.request_id, []).append(e.token_id)
    assert tokens == {r: res[r].token_ids for r in rids}
    assert all(len(v) == 4 for v in tokens.values())
    # each request has at most one token per step; a step per engine step with tokens
    for rec in trace.records:
        ids = [c.request_id for c in rec.batch]
        assert len(ids) == len(set(ids))
    assert len(trace.records) == 8
    # prefix hits: the three followers found the two shared blocks (8 tokens), as vLLM says
    cached = {c.request_id: c.num_cached for rec in trace.records for c in rec.batch
              if c.kind == "prefill"}
    assert cached == {r: res[r].cached_tokens for r in rids} == {rids[0]: 0, **{
        r: 8 for r in rids[1:]}}
    # the cache tree: every block the fake stored, once
    st = TreeState(1)
    for rec in trace.records:
        st.fold(rec.kv_events)
    assert len(st.parent) == len(fake.cache) == conn.tree.num_stored
    assert len(st.shared()) == 1
    kinds = [ev.kind for rec in trace.records for ev in rec.request_events]
    assert kinds.count("queued") == kinds.count("admitted") == kinds.count("finished") == 4
    assert not conn.warnings


def test_a_saved_trace_replays_into_the_views(make, tmp_path):
    from inferlab.widgets import SchedulerTimeline, TokenStream
    from inferlab.widgets.vllm_kv import VllmPrefixCache
    fake, conn = make()
    trace = conn.record()
    run_workload(fake, conn)
    trace.stop()
    back = Trace.load(trace.save(tmp_path / "vllm.trace.json"))
    assert len(back.records) == len(trace.records) and back.meta["vllm_warnings"] == []
    tl, ts, kv = SchedulerTimeline(back), TokenStream(back), VllmPrefixCache(back)
    assert len(tl.segments()) and len(tl._lb.order) == 4
    assert sum(len(r["times"]) for r in ts.rows()) == 16
    s = kv.summary
    assert s["cached"] == len(fake.cache) and s["shared"] == 1 and s["hit_tokens"] == 24
    assert s["blocks_total"] == 32 and s["block_size"] == 4
    assert kv.notes and "no request and no physical block" in kv.notes[0]
    kv.cursor = 0                                          # scrub back: fewer blocks then
    assert kv.summary["cached"] < s["cached"]
    for v in (tl, ts, kv):
        assert len(v.figure().data) >= 1


def test_views_follow_the_connector_live(make):
    from inferlab.widgets import SchedulerTimeline, TokenStream
    from inferlab.widgets.vllm_kv import VllmPrefixCache
    fake, conn = make()
    views = [SchedulerTimeline(conn), TokenStream(conn), VllmPrefixCache(conn)]
    run_workload(fake, conn)
    for v in views:
        v.detach()
        assert v.num_steps == 8 and v.live is False and not v.errors
    assert views[2].summary["cached"] == len(fake.cache) and views[2].warnings == []


def test_an_array_encoding_server_gives_the_same_tree(make):
    fake, conn = make(array_form=True)
    trace = Trace.record(conn)
    run_workload(fake, conn)
    st = TreeState(1)
    for rec in trace.records:
        st.fold(rec.kv_events)
    assert len(st.parent) == len(fake.cache) and not conn.warnings


def test_malformed_frames_and_unknown_events_warn_and_the_run_goes_on(make):
    from inferlab.widgets.vllm_kv import VllmPrefixCache
    fake, conn = make()
    view = VllmPrefixCache(conn)
    trace = Trace.record(conn)
    fake.send_kv_raw([b"kv", b"\x00\x01", b"junk"])                      # bad seq
    fake.send_kv_raw([b"kv", (0).to_bytes(8, "big")])                    # 2 parts
    fake.publish_kv([{"type": "BlockSqueezed", "block_hashes": [1]},
                     {"type": "BlockStored", "block_hashes": "x"}])
    rids = run_workload(fake, conn)
    text = "\n".join(conn.warnings)
    assert "malformed message was dropped" in text and "8 bytes" in text and "3 parts" in text
    assert "unknown event type 'BlockSqueezed'" in text and "malformed event" in text
    assert sum(len(r.emitted) for r in trace.records) == 16 and len(trace.requests) == len(rids)
    wait_until(lambda: len(view.warnings) == len(conn.warnings), 5)
    assert conn.stats()["kv_malformed"] == 2 and conn.stats()["kv_unknown"] == 1


def test_a_lost_batch_is_replayed(make):
    fake, conn = make()
    fake.publish_kv([fake.stored_event([101], None, [1, 2, 3, 4])], skip=True)   # lost
    fake.publish_kv([fake.stored_event([102], 101, [5, 6, 7, 8])])
    wait_until(lambda: conn.tree.num_stored == 2, 5)
    assert conn.stats()["kv_replayed"] == 1 and conn.stats()["kv_lost"] == 0
    assert not conn.warnings


def test_a_lost_batch_without_replay_is_a_warning(make):
    fake, conn = make(replay=False)
    fake.publish_kv([fake.stored_event([101], None, [1, 2, 3, 4])], skip=True)
    fake.publish_kv([fake.stored_event([102], 101, [5, 6, 7, 8])])
    wait_until(lambda: conn.tree.num_stored == 1, 5)
    wait_until(lambda: any("joined at seq 1" in w for w in conn.warnings), 5)
    fake.publish_kv([fake.removed_event([1])], skip=True)
    fake.publish_kv([fake.removed_event([102])])
    wait_until(lambda: any("1 batches of KV events lost (seq 2..2)" in w
                           for w in conn.warnings), 5)
    assert "no replay endpoint" in conn.warnings[-1]


def test_joining_a_running_server_replays_its_history(make):
    fake, conn = make(connect=False)
    for k in range(3):
        fake.publish_kv([fake.stored_event([200 + k], 199 + k if k else None, [k] * 4)])
    conn.connect(timeout=3)
    fake.publish_kv([fake.stored_event([203], 202, [3] * 4)])
    wait_until(lambda: conn.tree.num_stored == 4, 5)
    assert conn.stats()["kv_replayed"] == 3 and not conn.warnings


def test_out_of_order_and_restarted_sequences_warn(make):
    fake, conn = make()
    for k in range(3):
        fake.publish_kv([fake.stored_event([300 + k], None, [k] * 4)])
    wait_until(lambda: conn.tree.num_stored == 3, 5)
    fake.publish_kv([fake.stored_event([399], None, [9] * 4)], seq=1)          # repeated
    wait_until(lambda: any("seq 1 arrived after 2" in w for w in conn.warnings), 5)
    fake.publish_kv([fake.stored_event([398], None, [8] * 4)], seq=0)          # restart
    wait_until(lambda: any("publisher restarted" in w for w in conn.warnings), 5)
    assert conn.tree.num_stored == 4


def test_lost_and_malformed_step_reports_warn(make):
    fake, conn = make()
    # under the fake's lock: its heartbeat thread sends on the same socket, and a ZMQ socket
    # used from two threads at once can interleave two messages' frames (seen: a heartbeat
    # merged into a "3 parts" message, so one report more went missing)
    with fake.lock:
        fake.sseq += 3                                      # three reports never sent
        fake.spub.send_multipart([b"inferlab-steps", b"\x92\x01"])   # not a report
        fake.spub.send_multipart([b"inferlab-steps", msgspec.msgpack.encode({"type": "step"})])
    run_workload(fake, conn)
    text = "\n".join(conn.warnings)
    assert "3 step reports lost" in text and "malformed step report" in text
    assert conn.stats()["reports_bad"] == 2


def test_a_server_without_the_plugin_gets_inferred_steps(make):
    fake, conn = make(steps=False)
    assert conn.num_blocks == 1 and conn.model_name == "fake"   # no /metrics on the fake
    trace = Trace.record(conn)
    rids = [conn.submit(SHARED + [k], 3) for k in range(2)]
    fake.run(2, report=False)
    assert conn.streams.wait(timeout=5)
    wait_until(lambda: sum(len(r.emitted) for r in trace.records) == 6, 5)
    assert any("inferred from arrival times" in w for w in conn.warnings)
    for rec in trace.records:
        ids = [c.request_id for c in rec.batch]
        assert len(ids) == len(set(ids))
    assert {e.request_id for r in trace.records for e in r.emitted} == set(rids)


def test_another_vllm_version_is_named(make):
    fake, conn = make(version="0.99.0")
    assert any("vLLM 0.99.0" in w and "0.32.0" in w for w in conn.warnings)


def test_a_dying_server_aborts_its_requests_and_says_so(make, monkeypatch):
    from inferlab.widgets.vllm_kv import VllmPrefixCache
    monkeypatch.setattr(conn_mod, "SILENT_S", 0.5)
    fake, conn = make()
    view = VllmPrefixCache(conn)
    trace = Trace.record(conn)
    rids = [conn.submit(SHARED + [k], 50) for k in range(2)]
    fake.wait_waiting(2)
    fake.step(3)
    wait_until(lambda: sum(len(r.emitted) for r in trace.records) == 6, 5)
    fake.die()
    assert conn.streams.wait(timeout=5)
    assert all(conn.results[r].error for r in rids)
    wait_until(lambda: sum(ev.kind == "aborted" for rec in trace.records
                           for ev in rec.request_events) == 2, 5)
    wait_until(lambda: any("no word from the server" in w for w in conn.warnings), 5)
    wait_until(lambda: any("no word" in w for w in view.warnings), 5)
    assert sum(len(r.emitted) for r in trace.records) == 6          # what we had stays
    with pytest.raises(ConnectError, match="connect"):
        VllmConnector("http://x").submit([1], 2)


def test_an_unreachable_server_or_a_bad_endpoint_is_a_clear_error(make):
    from inferlab.connect.front.machine import free_port
    with pytest.raises(ConnectError, match="cannot reach.*inferlab vllm serve"):
        VllmConnector(f"http://127.0.0.1:{free_port()}").connect()
    fake, _ = make(connect=False)
    with pytest.raises(ConnectError, match="ZMQ endpoints"):
        VllmConnector(fake.url, kv=["nonsense://here"]).connect()


def test_a_raising_hook_does_not_stop_the_connector(make):
    fake, conn = make()

    def bad(rec):
        raise RuntimeError("boom")
    conn.subscribe(bad)
    trace = Trace.record(conn)
    run_workload(fake, conn)
    assert len(trace.records) == 8 and conn.bus.errors


def test_several_data_parallel_ranks_are_kept_apart(make, short_dir):
    import zmq

    from inferlab.connect import rank_endpoints
    assert rank_endpoints("tcp://gpu:5557", 3) == ["tcp://gpu:5557", "tcp://gpu:5558",
                                                   "tcp://gpu:5559"]
    with pytest.raises(ValueError, match="tcp://"):
        rank_endpoints("ipc:///tmp/kv", 2)
    fake, _ = make(connect=False)
    ctx = zmq.Context()
    eps = [f"ipc://{short_dir}/rank{r}" for r in range(2)]
    pubs = [ctx.socket(zmq.PUB) for _ in eps]
    for p, ep in zip(pubs, eps):
        p.bind(ep)
    conn = VllmConnector(fake.url, kv=eps, steps=[fake.steps_ep]).connect(timeout=3)
    try:
        assert conn.config.dp_ranks == 2
        for r, p in enumerate(pubs):                      # the same block on both ranks
            for seq in range(2):
                ev = fake.stored_event([500 + seq], 499 + seq if seq else None, [seq] * 4)
                p.send_multipart([b"kv", seq.to_bytes(8, "big"),
                                  msgspec.msgpack.encode([time.time(), [ev], r])])
        wait_until(lambda: conn.tree.num_stored == 4, 5)
        assert conn.tree.cached_prefix([0] * 4 + [1] * 4 + [9], 4) == 8
        assert {rank for rank, _ in conn.tree.slot} == {0, 1} and not conn.warnings
    finally:
        conn.close()
        ctx.destroy(0)

"""What tests/test_serve.py and tests/test_serve_faults.py share: a tiny engine served on a
free loopback port, a never-served twin for reference answers, a step recorder, and the
checks that a server is idle and holds no KV blocks. Imported with ``from serve_fixtures
import *`` (tests/ is on sys.path), so each test module gets its own server.
"""
from __future__ import annotations

import threading
import time

import openai
import pytest
from waiting import wait_until

import inferlab as il
import inferlab.serve

__all__ = ["TINY", "GREEDY", "HELLO", "M", "Recorder", "eng", "ref", "rec", "srv", "client",
           "reference", "idle", "assert_clean"]

TINY = dict(num_blocks=1024, block_size=4, max_model_len=256, max_num_seqs=32)
GREEDY = dict(temperature=0.0, extra_body={"ignore_eos": True})
HELLO = "The quick brown fox"
M = "tiny (random weights, seed 0)"     # the served model's name


class Recorder:
    """Subscribed before the server starts: how many requests a step ran at most, and which
    were aborted. Hooks run in the server's engine thread, so ``pace`` (a sleep per step)
    slows the engine for the disconnect tests and ``hold`` stops it until ``release``."""

    def __init__(self):
        self.max_batch = 0
        self.aborted: list[str] = []
        self.pace = 0.0
        self.hold = False                  # while set, each step waits for ``release``
        self.release = threading.Event()

    def __call__(self, rec):
        self.max_batch = max(self.max_batch, len(rec.batch))
        self.aborted += [e.request_id for e in rec.request_events if e.kind == "aborted"]
        if self.pace:
            time.sleep(self.pace)
        if self.hold:
            self.release.wait(120)


@pytest.fixture(scope="module")
def eng():
    return il.Engine("tiny", **TINY)


@pytest.fixture(scope="module")
def ref():
    """The same model and settings, never served: the reference answers."""
    return il.Engine("tiny", **TINY)


@pytest.fixture(scope="module")
def rec(eng):
    r = Recorder()
    eng.subscribe(r)
    return r


@pytest.fixture(scope="module")
def srv(eng, rec):
    s = inferlab.serve.start(eng, port=0)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url, api_key="none", max_retries=0)


def reference(ref, prompts, max_tokens, **kw):
    return ref.generate(prompts, il.SamplingParams(max_tokens=max_tokens, ignore_eos=True, **kw),
                        use_tqdm=False)


def idle(srv, eng):
    """Wait until the server holds no request, then return the engine's stats."""
    wait_until(lambda: srv.driver.num_open == 0 and not eng.has_unfinished_requests(), 60,
               what="the server to finish its requests")
    return eng.stats()


def assert_clean(srv, eng):
    st = idle(srv, eng)
    assert (st.kv_blocks_used, st.num_running, st.num_waiting) == (0, 0, 0), st
    assert all(r == 0 for r in eng.kv.pool.ref_cnt)

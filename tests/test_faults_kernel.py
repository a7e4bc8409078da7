"""Interrupts in a real Jupyter kernel (issue 15), driven through jupyter_client.

Kernel -> Interrupt is a SIGINT to the kernel process (``km.interrupt_kernel()``). Pressed
during ``generate``, during a ``stream`` loop, and while the Lab runs in the background, it
leaves the engine with no KV blocks held and no request running or waiting; the next run
gives the same tokens as a fresh engine; the views show the run up to where it stopped (the
aborted requests marked). The interrupt lands between two steps (``core/interrupts.py``); an
idle kernel hands it to the running Labs, which stop as their Stop button does
(``widgets/lab.py``).
"""
import queue

import pytest
from waiting import wait_until

import jupyter_client  # a dependency of jupyterlab: missing means a broken setup, not a skip

SETUP = """
import time
import numpy as np
import inferlab as il
from inferlab.widgets import Lab, SchedulerTimeline, TokenStream
KW = dict(num_blocks=64, block_size=4, max_num_seqs=4)
REF_PROMPTS = ["a fresh engine", [5, 6, 7, 8, 9]]
REF_SP = il.SamplingParams(max_tokens=12, ignore_eos=True)
REF = [o.token_ids for o in il.Engine("tiny", **KW).generate(REF_PROMPTS, REF_SP, use_tqdm=False)]

def marker(n=3):
    seen = []
    def mark(rec):
        if not seen and rec.step >= n:
            seen.append(1)
            print("STARTED", flush=True)
    return mark

def check(eng, views):
    s = eng.stats()
    assert (s.kv_blocks_used, s.num_running, s.num_waiting) == (0, 0, 0), s
    assert not eng.bus.errors, eng.bus.errors
    for v in views:                     # the views show where it stopped
        v.flush()
        last = v.trace.records[-1]
        assert any(e.kind == "aborted" for e in last.request_events), last.request_events
        assert v.num_steps == len(v.trace) and not v.errors, v.errors
    tl = [v for v in views if isinstance(v, SchedulerTimeline)]
    assert all(any(k != "finished" for _, k in v.finishes().values()) for v in tl)
    again = [o.token_ids for o in eng.generate(REF_PROMPTS, REF_SP, use_tqdm=False)]
    assert again == REF, (again, REF)
    print("CHECKED", s.num_steps, flush=True)
"""


class Kernel:
    def __init__(self):
        self.km = jupyter_client.KernelManager(kernel_name="python3")
        self.km.start_kernel()
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def start(self, code: str) -> str:
        return self.kc.execute(code, store_history=False)

    def wait(self, msg_id: str, timeout: float = 300, until: str | None = None) -> dict:
        """Read iopub for ``msg_id`` until its reply (or until ``until`` is printed);
        returns {"status", "ename", "out"}."""
        out: list[str] = []

        def reply():
            """One iopub message read; the result once ``msg_id`` is done, else None."""
            try:
                msg = self.kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                return None
            if msg["parent_header"].get("msg_id") != msg_id:
                return None
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
                if until and until in "".join(out):
                    return {"status": "printed", "out": "".join(out)}
            elif kind == "error":
                out.append(f"{content['ename']}: {content['evalue']}")
            elif kind == "status" and content["execution_state"] == "idle":
                shell = self.kc.get_shell_msg(timeout=30)
                while shell["parent_header"].get("msg_id") != msg_id:
                    shell = self.kc.get_shell_msg(timeout=30)
                return {"status": shell["content"]["status"],
                        "ename": shell["content"].get("ename"), "out": "".join(out)}
            return None

        return wait_until(reply, timeout, interval=0,
                          what=lambda: f"the reply; output so far: {''.join(out)[-2000:]}")

    def run(self, code: str, timeout: float = 300) -> dict:
        r = self.wait(self.start(code), timeout)
        assert r["status"] == "ok", r
        return r

    def value(self, expr: str):
        return eval(self.run(f"print(repr({expr}))")["out"].strip())

    def interrupt_during(self, code: str) -> dict:
        """Run ``code``; once it prints STARTED, interrupt the kernel; its reply."""
        msg_id = self.start(code)
        assert self.wait(msg_id, until="STARTED")["status"] == "printed"
        self.km.interrupt_kernel()
        return self.wait(msg_id)

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    try:
        k.run(SETUP, timeout=600)
        yield k
    finally:
        k.close()


def test_interrupt_during_generate(kernel):
    kernel.run("eng = il.Engine('tiny', **KW); views = [SchedulerTimeline(eng), "
               "TokenStream(eng)]; eng.subscribe(marker())")
    r = kernel.interrupt_during(
        "eng.generate(['a prompt that goes on'] * 64, il.SamplingParams(max_tokens=200, "
        "ignore_eos=True), use_tqdm=False)")
    assert r["status"] == "error" and r["ename"] == "KeyboardInterrupt", r
    assert "CHECKED" in kernel.run("check(eng, views)")["out"]


def test_interrupt_during_stream(kernel):
    kernel.run("eng = il.Engine('tiny', **dict(KW, num_blocks=512)); "
               "views = [SchedulerTimeline(eng)]; eng.subscribe(marker())")
    r = kernel.interrupt_during(
        "for d in eng.stream('a story', il.SamplingParams(max_tokens=1500, ignore_eos=True)):"
        "  # not a wait"
        "\n    time.sleep(0.005)     # a reader's loop: printing, drawing")
    assert r["status"] == "error" and r["ename"] == "KeyboardInterrupt", r
    assert "CHECKED" in kernel.run("check(eng, views)")["out"]


def test_interrupt_while_the_lab_runs_in_the_background(kernel):
    kernel.run("lab = Lab('tiny', workload_kind='random tokens: synthetic', num_requests=200, rate=0.0, max_num_seqs=4); lab.start()")
    # the cell has returned: the kernel is idle while the run goes on in its thread
    def five_steps() -> bool:
        if kernel.value("len(lab.trace) if lab.trace is not None else 0") >= 5:
            return True
        assert kernel.value("lab.running"), kernel.value("lab.status.value")  # still going
        return False

    wait_until(five_steps, 300, interval=0.2, what="the Lab's run to make 5 steps")
    kernel.km.interrupt_kernel()            # the kernel is idle: no cell gets it
    kernel.run("lab.thread.join(120); assert not lab.running")
    status = kernel.value("lab.status.value")
    assert status.startswith("interrupted"), status
    assert "CHECKED" in kernel.run("check(lab.engine, lab.views[:2])")["out"]
    # the kernel itself is fine: an ordinary cell runs, and a second interrupt while idle
    # with no Lab running does nothing
    kernel.km.interrupt_kernel()
    assert kernel.value("1 + 1") == 2

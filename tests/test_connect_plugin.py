"""inferlab's stat-logger plugin inside vLLM's venv (no server): vLLM finds it through its
entry-point group, the vLLM internals it reads exist in the pinned release with the types it
expects, it reads real SchedulerStats / IterationStats into a StepReport, publishes it, and it
does nothing without INFERLAB_VLLM_STEPS_ENDPOINT. The lab's venv never imports vllm: this
runs in .venv-vllm, in a subprocess.
"""
import json
import pathlib
import subprocess
import sys
import tempfile

import pytest

from inferlab.connect.front.machine import VllmServerError, vllm_python
from inferlab.connect.wire import step_reports

CHECK = r"""
import dataclasses, json, os, sys, tempfile
import vllm, zmq
from vllm.v1.engine import FinishReason
from vllm.v1.metrics.loggers import AggregateStatLoggerBase, load_stat_logger_plugin_factories
from vllm.v1.metrics.stats import (FinishedRequestStats, IterationStats, PrefixCacheStats,
                                   PromptTokenStats, SchedulerIterationDetails, SchedulerStats)
from inferlab.connect.plugin import stat_logger
from inferlab.connect.wire import step_reports

out = {"version": vllm.__version__}
out["discovered"] = stat_logger.InferlabStepLogger in load_stat_logger_plugin_factories()
out["aggregate"] = issubclass(stat_logger.InferlabStepLogger, AggregateStatLoggerBase)
# every internal field the plugin reads, with its declared type, in this release
def fields(cls):
    return {f.name: str(f.type) for f in dataclasses.fields(cls)}
out["fields"] = {c.__name__: fields(c) for c in (SchedulerStats, PrefixCacheStats,
                 SchedulerIterationDetails, FinishedRequestStats, PromptTokenStats)}
it = IterationStats()
out["iteration_attrs"] = sorted(vars(it))
# real stats objects in, a report out
s = SchedulerStats(num_running_reqs=2, num_waiting_reqs=1, kv_cache_usage=0.25,
                   prefix_cache_stats=PrefixCacheStats(requests=1, queries=64, hits=32),
                   iteration_details=SchedulerIterationDetails(3, 1, 64, 2, 2, 12.5))
it.num_generation_tokens = 3
it.prompt_token_stats.total, it.prompt_token_stats.computed = 64, 32
it.prompt_token_stats.cached_tokens = 32
it.finished_requests.append(FinishedRequestStats(
    finish_reason=FinishReason.LENGTH, request_id="cmpl-r1-0", e2e_latency=1.5,
    num_prompt_tokens=64, num_generation_tokens=8, queued_time=0.1, prefill_time=0.2,
    decode_time=1.2, num_cached_tokens=32))
rep = stat_logger.step_report(0, 7, s, it)
out["report"] = step_reports.encode(rep).hex()
# inert without the endpoint; publishing with it
os.environ.pop(step_reports.ENV_ENDPOINT, None)
out["inert"] = stat_logger.InferlabStepLogger(None, [0])._sock is None
d = tempfile.mkdtemp(prefix="ilp")
os.environ[step_reports.ENV_ENDPOINT] = ep = f"ipc://{d}/steps"
class Cfg: pass
cfg = Cfg()
lg = stat_logger.InferlabStepLogger(cfg, [0])
sub = zmq.Context.instance().socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(ep)
kinds = set()
sys.path.insert(0, sys.argv[1])                   # tests/: the one way a test waits
from waiting import wait_until

def both_kinds():
    lg.record(s, it, engine_idx=0)
    if sub.poll(100):
        kinds.add(type(step_reports.decode(sub.recv_multipart()[1])).__name__)
    return len(kinds) >= 2

wait_until(both_kinds, 10, interval=0, what=lambda: f"a step report and the 1 s heartbeat: {kinds}")
out["published"] = sorted(kinds)
print("RESULT " + json.dumps(out))
"""


@pytest.mark.vllm
@pytest.mark.slow
def test_the_plugin_in_vllms_venv():
    try:
        py = vllm_python()
    except VllmServerError as e:
        pytest.fail(str(e))
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([str(py), "-c", CHECK, str(pathlib.Path(__file__).parent)],
                           capture_output=True, text=True, timeout=300,
                           cwd=d)
    line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    assert r.returncode == 0 and line, r.stderr[-3000:]
    out = json.loads(line[0][7:])
    assert out["version"] == step_reports.PINNED_VLLM, "the plugin's field reads are pinned to " \
        f"vLLM {step_reports.PINNED_VLLM}: check stat_logger.step_report against {out['version']}"
    assert out["discovered"] and out["aggregate"] and out["inert"]
    f = out["fields"]
    for name in ("num_running_reqs", "num_waiting_reqs", "kv_cache_usage",
                 "prefix_cache_stats", "iteration_details"):
        assert name in f["SchedulerStats"]
    assert {"requests", "queries", "hits", "reset"} <= set(f["PrefixCacheStats"])
    assert {"num_ctx_requests", "num_ctx_tokens", "num_generation_requests",
            "num_generation_tokens", "elapsed_ms"} <= set(f["SchedulerIterationDetails"])
    assert {"request_id", "finish_reason", "num_prompt_tokens", "num_generation_tokens",
            "num_cached_tokens", "e2e_latency", "queued_time", "prefill_time",
            "decode_time"} <= set(f["FinishedRequestStats"])
    assert {"total", "computed", "cached_tokens"} <= set(f["PromptTokenStats"])
    assert {"num_generation_tokens", "prompt_token_stats", "num_preempted_reqs",
            "finished_requests"} <= set(out["iteration_attrs"])
    rep = step_reports.decode(bytes.fromhex(out["report"]))
    assert (rep.seq, rep.num_running, rep.num_waiting, rep.kv_usage) == (7, 2, 1, 0.25)
    assert (rep.prefix_requests, rep.prefix_queries, rep.prefix_hits) == (1, 64, 32)
    assert (rep.ctx_requests, rep.ctx_tokens, rep.gen_tokens, rep.elapsed_ms) == \
        (1, 64, 2, 12.5)                  # fixed input: the stats the test fed the plugin
    assert (rep.new_tokens, rep.prompt_tokens, rep.prompt_cached) == (3, 64, 32)
    fin = rep.finished[0]
    assert (fin.request_id, fin.finish_reason, fin.num_cached_tokens) == ("cmpl-r1-0",
                                                                         "length", 32)
    assert "StepReport" in out["published"] and "EngineInfo" in out["published"]


def test_the_lab_venv_never_imports_vllm():
    code = ("import sys, inferlab.connect.front.connector, inferlab.connect.front.launcher, "
            "inferlab.widgets.vllm_kv; assert 'vllm' not in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]

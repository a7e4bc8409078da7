"""`inferlab bench serve`: inferlab's server beside vLLM's, measured by `vllm bench serve`.

The fast tests read a saved client result (tests/fixtures/vllm_bench_serve_result.json, one
real `vllm bench serve` run against `inferlab serve`: 3 prompts x 16 tokens -> 4 tokens, rate
inf), aggregate runs, and start and stop a stand-in server with a child process (no vLLM).
The slow one runs `inferlab bench serve --smoke` for real (both servers, vLLM's client from
.venv-vllm): a missing venv fails it (it does not skip), as in tests/test_vllm.py.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from inferlab.lab import stack_bench, stack_table
from inferlab.lab.serving_stacks import ServerFailed, ServerProcess, group_alive
from inferlab.serve import timing
from waiting import wait_until

FIX = pathlib.Path(__file__).parent / "fixtures" / "vllm_bench_serve_result.json"


def test_reads_a_saved_client_result():
    m = stack_bench.read_client_result(str(FIX))
    raw = json.loads(FIX.read_text())
    assert set(stack_bench.KEYS) <= set(m)
    assert (m["completed"], m["failed"], m["total_output_tokens"]) == (3, 0, 12)
    assert all(m[k] == raw[k] for k in stack_bench.KEYS if k in raw)   # read as the client saved
    assert m["errors"] == []


def test_a_result_without_the_percentiles_is_refused(tmp_path):
    data = json.loads(FIX.read_text())
    del data["p99_tpot_ms"]
    data["errors"] = ["", "Traceback ...\nConnectionRefusedError"]
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(stack_bench.ClientFailed, match="p99_tpot_ms"):
        stack_bench.read_client_result(str(bad))
    data["p99_tpot_ms"] = 1.0
    bad.write_text(json.dumps(data))
    assert stack_bench.read_client_result(str(bad))["errors"] == [
        "Traceback ...\nConnectionRefusedError"]


def test_runs_become_median_and_range_per_rate_and_server():
    base = stack_bench.read_client_result(str(FIX))
    runs = [{"rate": r, "server": s, "metrics": {**base, "p50_ttft_ms": v, "completed": c}}
            for r, s, v, c in (("2", "inferlab", 3.0, 3), ("2", "vLLM", 9.0, 3),
                               ("2", "inferlab", 1.0, 2), ("2", "vLLM", 7.0, 3),
                               ("2", "inferlab", 2.0, 3), ("inf", "vLLM", 5.0, 3))]
    s = stack_bench.summarize(runs)
    assert list(s) == ["2", "inf"] and list(s["2"]) == ["inferlab", "vLLM"]
    assert s["2"]["inferlab"]["p50_ttft_ms"] == {"median": 2.0, "lo": 1.0, "hi": 3.0,  # fixed input
                                                 "n": 3}
    assert s["inf"]["vLLM"]["p50_ttft_ms"]["n"] == 1                 # fixed input
    result = {"config": {"num_prompts": 3}, "summary": s}
    rows = stack_table.rows(result)
    assert [r[:2] for r in rows] == [["2 req/s", "inferlab"], ["2 req/s", "vLLM"],
                                     ["inf req/s", "vLLM"]]
    assert rows[0][2] == "2.0 (1.0-3.0)" and rows[0][-1] == "2/3"   # the fewest completed
    assert rows[2][2] == "5.0" and rows[2][-1] == "3/3"
    assert len(rows[0]) == len(stack_table.HEADER) == 2 + len(stack_table.COLUMNS) + 1
    md = stack_table.markdown(result).splitlines()
    assert len(md) == 2 + len(rows) and md[2].startswith("| 2 req/s | inferlab | 2.0 (1.0-3.0)")


def test_the_server_timing_sits_beside_the_client_numbers():
    parts = lambda v: {"ttft_ms": {p: v for p in timing.TTFT_PARTS}, "per_token_ms": {
        p: v for p in timing.DECODE_PARTS}, "requests": 3, "batch_p50": 2,
        "slowest_ttft_ms": {**{p: 2 * v for p in timing.TTFT_PARTS}, "total": 14 * v}}
    base = stack_bench.read_client_result(str(FIX))
    runs = [{"rate": "1", "server": s, "metrics": base, "repeat": k,
             **({"server_timing": parts(v)} if s == "inferlab" else {})}
            for k, (s, v) in enumerate((("inferlab", 1.0), ("vLLM", 0), ("inferlab", 3.0)))]
    result = {"config": {"num_prompts": 3}, "summary": stack_bench.summarize(runs), "runs": runs}
    (row,) = stack_table.timing_rows(result)
    assert len(row) == len(stack_table.TIMING_HEADER)
    assert row[0] == "1 req/s" and row[2] == "2.0"            # the median over the repeats
    assert row[6] == "6.0"                                    # flush + hand-off + write
    assert row[-1] == "2"
    (slow,) = stack_table.slowest_rows(result)
    assert len(slow) == len(stack_table.SLOWEST_HEADER)
    assert slow[2] == "4.0" and slow[6] == "12.0" and slow[-1] == "28.0"   # parse, out, total
    runs[0]["server_timing"] = runs[2]["server_timing"] = {"requests": 0}
    assert stack_table.timing_rows(result) == []              # nothing timed: no row


def test_the_goal_names_each_gap_and_whether_the_ranges_overlap():
    sp = lambda m, lo, hi: {"median": m, "lo": lo, "hi": hi, "n": 3}      # noqa: E731
    same = {k: sp(10.0, 9.0, 11.0) for _, k, _ in stack_table.GOAL}
    summary = {"1": {"inferlab": same, "vLLM": same},
               "inf": {"inferlab": {**same, "p99_ttft_ms": sp(12.0, 11.5, 13.0),   # fixed input
                                    "output_throughput": sp(9.0, 8.0, 10.0)},
                       "vLLM": same}}
    g = stack_table.gaps({"summary": summary})
    assert g["1"] == []                                   # equal is not behind
    assert [(m, round(p), o) for m, p, o in g["inf"]] == [
        ("TTFT p99", 20, False), ("output tok/s", 10, True)]
    text = stack_table.gaps_sentence({"summary": summary})
    assert text.startswith("at 1 req/s: TTFT and TPOT p50 and p99 at or below vLLM's")
    assert "all at once: behind on TTFT p99 by 20.0%, output tok/s by 10.0% (the ranges " \
           "overlap)" in text


def test_every_run_sends_prompts_no_earlier_run_sent():
    """Both servers share a run's seed; no two runs of one server share one (the random
    dataset would send the same prompts, and a prefix cache would remember them)."""
    rates, repeats = 4, 3
    seeds = [stack_bench.run_seed(7, rep, k, rates) for rep in range(repeats)
             for k in range(rates)]
    assert len(set(seeds)) == rates * repeats and min(seeds) == 7


def test_the_client_command_asks_for_what_is_parsed():
    argv = stack_bench.client_command("vllm", "http://127.0.0.1:1", "/m", float("inf"), 3,
                                      8, 32, 4, "/r", "x.json")
    assert argv[:3] == ["vllm", "bench", "serve"]
    flags = dict(zip(argv[3::], argv[4::]))
    assert flags["--request-rate"] == "inf" and flags["--seed"] == "3"
    assert flags["--dataset-name"] == "random" and flags["--metric-percentiles"] == "50,99"
    assert set(flags["--percentile-metrics"].split(",")) >= {"ttft", "tpot", "itl"}
    assert "--ignore-eos" in argv and "--save-result" in argv
    assert stack_bench.rate_key(2.0) == "2" and stack_bench.rate_key(0.5) == "0.5"


STAND_IN = textwrap.dedent("""
    import http.server, subprocess, sys
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # a child
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    print("up", flush=True)
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


def test_a_server_and_its_children_leave_no_process(tmp_path):
    from inferlab.connect.front.machine import free_port
    port = free_port()
    srv = ServerProcess("stand-in", [sys.executable, "-c", STAND_IN, str(port)],
                        dict(os.environ), port, str(tmp_path / "log"))
    try:
        srv.start(timeout=60)
        assert srv.healthy()
        state = lambda: open(f"/proc/{srv.pgid}/stat").read().rsplit(")", 1)[1].split()[0]
        with srv.frozen():
            wait_until(lambda: state() == "T", 10, what="the server stopped (SIGSTOP)")
        wait_until(lambda: state() != "T", 10, what="the server continued (SIGCONT)")
        assert srv.healthy()
    finally:
        srv.stop(timeout=5)
    assert not group_alive(srv.pgid)


MIDDLE = textwrap.dedent("""
    import os, sys, time
    from inferlab.lab.serving_stacks import ServerProcess, reaped
    port, log, stand_in = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    srv = ServerProcess("stand-in", [sys.executable, "-c", stand_in, str(port)],
                        dict(os.environ), port, log).start(timeout=60)
    with reaped([srv.pgid]), srv.frozen():
        print(srv.pgid, flush=True)
        time.sleep(600)                         # killed here, its server frozen
""")


def test_a_frozen_server_dies_with_a_killed_parent(tmp_path):
    """SIGKILL the process that froze its server: the watchman continues and ends the group
    (the server's own PR_SET_PDEATHSIG waits in vain while it is stopped)."""
    from inferlab.connect.front.machine import free_port
    mid = subprocess.Popen([sys.executable, "-c", MIDDLE, str(free_port()),
                            str(tmp_path / "log"), STAND_IN], stdout=subprocess.PIPE, text=True)
    try:
        pgid = int(mid.stdout.readline())
        wait_until(lambda: open(f"/proc/{pgid}/stat").read().rsplit(")", 1)[1].split()[0]
                   == "T", 10, what="the server stopped (SIGSTOP)")
    finally:
        mid.kill()
        mid.wait()
    wait_until(lambda: not group_alive(pgid), 30, interval=0.2,
               what=f"process group {pgid} gone after its parent was killed")


def test_a_server_that_exits_reports_its_log(tmp_path):
    srv = ServerProcess("broken", [sys.executable, "-c", "print('no model here'); raise "
                                   "SystemExit(3)"], dict(os.environ), 1, str(tmp_path / "log"))
    with pytest.raises(ServerFailed, match=r"(?s)exited with code 3.*no model here"):
        srv.start(timeout=60)
    assert not group_alive(srv.pgid)


def test_the_lab_side_imports_without_vllm():
    code = ("import sys, inferlab.lab.stack_bench, inferlab.bench.serve; "
            "assert 'vllm' not in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.full("tests/test_bench_serve.py::test_reads_a_saved_client_result")
@pytest.mark.vllm
@pytest.mark.slow
def test_smoke_run_measures_both_stacks(tmp_path):
    from inferlab.connect.front.machine import VllmServerError, vllm_python
    try:
        vllm_python()
    except VllmServerError as e:
        pytest.fail(str(e))
    from inferlab.cli import main
    out = tmp_path / "serve.json"
    assert main(["bench", "serve", "--smoke", "--timing", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["command"] == f"inferlab bench serve --smoke --timing --out {out}"
    assert {"date", "cpu", "cores", "load"} <= set(saved)
    res = saved["results"]
    cfg = res["config"]
    sent = cfg["num_prompts"]
    assert (sent, cfg["repeats"], cfg["rates"]) == (4, 1, ["8"])
    assert list(res["summary"]) == ["8"] and set(res["summary"]["8"]) == {"inferlab", "vLLM"}
    assert len(res["runs"]) == 2 and [r["server"] for r in res["runs"]] == ["inferlab", "vLLM"]
    for run in res["runs"]:
        m = run["metrics"]
        assert (m["completed"], m["failed"]) == (sent, 0), m["errors"]
        assert m["total_output_tokens"] == sent * cfg["output_len"]       # ignore_eos
        assert all(m[k] > 0 for k in stack_bench.KEYS[:6])
        assert " bench serve " in run["command"] and "--request-rate 8" in run["command"]
    timed = res["runs"][0]["server_timing"]          # inferlab serve --timing
    assert timed["requests"] == sent and "server_timing" not in res["runs"][1]
    assert [r[0] for r in stack_table.timing_rows(res)] == ["8 req/s"]
    assert res["servers"]["vLLM"].split()[1:3] == ["serve", cfg["model_dir"]]
    assert " -m inferlab.cli serve " in res["servers"]["inferlab"]
    g = res["greedy"]
    assert g["of"] == 2 and 0 <= g["agree"] <= 2 and len(g["prompts"]) == 2
    assert all(set(p["texts"]) == {"inferlab", "vLLM"} for p in g["prompts"])
    assert "SIGSTOP" in res["placement"]
    assert res["left_running"] == {}
    assert not any(group_alive(pg) for pg in res["process_groups"].values())

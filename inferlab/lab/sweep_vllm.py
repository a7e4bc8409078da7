"""A sweep's grid on both serving stacks: each point served by ``inferlab serve`` and by
``vllm serve`` with that point's settings, both measured from outside by vLLM's own client.

    res = measure_pair([{"max_num_seqs": 4}, {"max_num_seqs": 16}], repeats=2)
    res["results"]["engines"]["vLLM"][0]["metrics"]["output_tok_s"]

A point is a dict of ``vllm serve`` arguments (the shape of ``--serve-params``,
``bench/sweep.py``): vLLM gets them as its own flags (``--max-num-seqs 4``; a boolean is
``--flag`` / ``--no-flag``), ``inferlab serve`` as its flags of the same names
(``LAB_FLAGS``); a name either lacks is a clear error before anything starts. Both servers
start on the default model (SmolLM2, fp32, the same weights directory: serving_stacks.py)
with ``max_num_seqs`` 64 and ``max_model_len`` 2048 unless the point says otherwise, take a
greedy warm-up prompt, then are measured A B A B: per repeat, the client against inferlab
(vLLM frozen, SIGSTOP), then against vLLM (inferlab frozen); both are stopped before the
next point. The busy check is the lab's (``busy.others_cpus`` over the client runs, less the
server's and client's own CPU time; ``protocol.repeat_warning`` on repeats that disagree).

Traffic: the same for both and for every point: a request log's requests (default the
bundled chat requests, ``sim/data/request_log_example.jsonl``: single questions, multi-turn
chats, tool calls) as prompt texts in vLLM's ``sharegpt`` dataset, each conversation
rendered by the model's chat template as the lab renders it (``chat_dataset``), each answer
exactly ``output_len`` tokens (``--ignore-eos``; the log's ``max_tokens`` is not used), Poisson arrivals at ``rate``
req/s drawn from ``seed + repeat`` (the log's own arrival times are not replayed). Each
repeat's conversations start with "[repeat N]", so no server sees a prompt twice (a prefix cache
would remember it) while both see the same ones.

Each run's numbers, from the client's saved result (``--save-detailed``), defined as in the
lab's sweep (``sweep_result``): output tokens/s in total = the client's
``output_throughput`` (output tokens of the completed requests over the run's duration,
first send to last answer); users = the most requests in flight at once, exact from each
request's send time and latency (``sweep_result.peak_overlap``; the client's own
``max_concurrent_requests`` counts them in one-second buckets); output tokens/s per user =
the total over the users; TTFT and ITL p50/p99 = the client's. A point's row holds the
medians over the repeats and their range (``sweep_result.point_metrics``).
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import tempfile

from ..connect.front.machine import free_port
from ..errors import InvalidInputError
from . import protocol
from .serving_stacks import ServerFailed, inferlab_server, reaped, vllm_cli, vllm_server
from .stack_bench import (MODEL_NAME, client_command, greedy_agreement, portable,
                          read_client_result, run_client, weights_dir_for_vllm)
from .sweep_result import peak_overlap, point_metrics, row

FORMAT, VERSION = "inferlab-sweep-vllm", 1
ENGINES = ("inferlab", "vLLM")
# the `vllm serve` arguments `inferlab serve` has too (the same name and meaning)
LAB_FLAGS = ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
             "enable_prefix_caching", "block_size", "max_model_len", "num_gpu_blocks_override",
             "long_prefill_token_threshold", "dtype")
RENAMED = {"num_gpu_blocks_override": "num_blocks"}      # inferlab serve's name for it
LOG = os.path.join(os.path.dirname(os.path.dirname(__file__)), "sim", "data",
                   "request_log_example.jsonl")
BASE = {"max_num_seqs": 64, "max_model_len": 2048}
CLOCK = "wall (vllm bench serve times each request from outside the server)"


def _flag(name: str, value) -> list[str]:
    dash = name.replace("_", "-")
    if isinstance(value, bool):
        return [f"--{dash}" if value else f"--no-{dash}"]
    return [f"--{dash}", str(value)]


def point_flags(point: dict) -> dict[str, list[str]]:
    """engine -> the extra flags its server takes for ``point`` (vLLM names, ``_`` or
    ``-``); a name ``inferlab serve`` lacks is an InvalidInputError."""
    if not isinstance(point, dict):
        raise InvalidInputError(f"a point must be a dict of `vllm serve` arguments, got "
                                f"{point!r}")
    knobs = {k.replace("-", "_"): v for k, v in point.items()}
    alien = [k for k in knobs if k not in LAB_FLAGS]
    if alien:
        raise InvalidInputError(f"--vllm runs each point on both servers; `inferlab serve` "
                                f"has no flag for {alien}; the names both take: "
                                f"{list(LAB_FLAGS)}")
    return {"inferlab": [a for k, v in knobs.items() for a in _flag(RENAMED.get(k, k), v)],
            "vLLM": [a for k, v in knobs.items() for a in _flag(k, v)]}


def chat_dataset(log: str, path: str, repeat: int, tokenizer) -> int:
    """Write ``log``'s requests (JSON Lines rows with ``messages`` [+ ``tools``] or a text
    ``prompt``) to ``path`` in the shape of vLLM's ``sharegpt`` dataset (a JSON list of
    ``conversations``, the first turn the prompt text, sent as it is): each conversation
    rendered by the model's chat template as the lab renders it
    (``core.prompts.render_messages``), its first message tagged with the repeat; their
    number. (vLLM's ``custom`` dataset would read JSON Lines, but through pandas, which its
    CPU venv lacks.)"""
    from ..core.prompts import render_messages
    rows = []
    try:
        with open(log, encoding="utf-8") as f:
            lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    except OSError as e:
        raise InvalidInputError(f"cannot read request log {log}: {e.strerror}") from None
    tag = f"[repeat {repeat + 1}] "
    for n, line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise InvalidInputError(f"{log}:{n}: not JSON (a request log is JSON Lines)") from None
        if isinstance(rec, dict) and isinstance(rec.get("messages"), list) and rec["messages"]:
            msgs = [dict(m) if isinstance(m, dict) else m for m in rec["messages"]]
            if isinstance(msgs[0], dict) and isinstance(msgs[0].get("content"), str):
                msgs[0]["content"] = tag + msgs[0]["content"]
            try:
                text = render_messages(msgs, tokenizer, rec.get("tools"))
            except InvalidInputError as e:
                raise InvalidInputError(f"{log}:{n}: {e}") from None
        elif isinstance(rec, dict) and isinstance(rec.get("prompt"), str):
            text = tag + rec["prompt"]
        else:
            raise InvalidInputError(f"{log}:{n}: the vLLM side sends text: a row needs "
                                    "'messages' or a text 'prompt'")
        rows.append({"id": str(rec.get("id", n)), "conversations": [
            {"from": "human", "value": text}, {"from": "gpt", "value": ""}]})
    if not rows:
        raise InvalidInputError(f"request log {log} holds no request")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(rows, f)
    return len(rows)


def client_numbers(path: str) -> dict:
    """One run's numbers from a ``vllm bench serve`` result saved with --save-detailed (see
    the module's text); ``error`` set when a request failed."""
    m = read_client_result(path)
    with open(path) as f:
        data = json.load(f)
    spans = [(s, s + lat) for s, lat, e in zip(data.get("start_times") or [],
                                              data.get("latencies") or [],
                                              data.get("errors") or [])
             if not e and lat and lat > 0]
    users = peak_overlap(spans)
    tok = m["output_throughput"]
    bad = m.get("failed") or 0
    return {"output_tok_s": tok, "output_tok_s_per_user": tok / users if users else None,
            "ttft_p50_ms": m["p50_ttft_ms"], "ttft_p99_ms": m["p99_ttft_ms"],
            "itl_p50_ms": m["p50_itl_ms"], "itl_p99_ms": m["p99_itl_ms"],
            "users": users, "requests": m["completed"], "failed": bad,
            "client_peak_users": m.get("max_concurrent_requests"),
            "error": (f"{bad} of {bad + m['completed']} requests failed: "
                      f"{(m['errors'] or ['?'])[0][:200]}") if bad or not m["completed"] else None}


def _why(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: " + (" / ".join(text[:1] + text[-2:]) if text else "")[:400]


def measure_pair(points: list[dict], *, log: str = LOG, requests: int | None = None,
                 repeats: int = 2, rate: float = 4.0, output_len: int = 64, seed: int = 0,
                 command: str | None = None, progress=None) -> dict:
    """Every point on both servers (see the module's text); the result file's dict (its
    meta, ``format``, ``results``: ``engines`` -> rows, ``runs``, ``config``, ...).
    ``requests``: how many of the log's requests each run sends (default all)."""
    flags = [point_flags(p) for p in points]            # a bad name: said before any start
    if not isinstance(repeats, int) or repeats < 1:
        raise InvalidInputError(f"repeats must be an int >= 1, got {repeats!r}")
    if not (isinstance(rate, (int, float)) and rate > 0):
        raise InvalidInputError(f"rate must be requests/s > 0 (inf: all at once), got {rate!r}")
    if not (isinstance(output_len, int) and output_len > 0):
        raise InvalidInputError(f"output_len must be an int > 0, got {output_len!r}")
    say = progress or (lambda line: None)
    knobs = [{k.replace("-", "_"): v for k, v in p.items()} for p in points]
    runs, times, greedy, servers_cmd, errors = [], {}, {}, {}, {}
    own = others = timed = 0.0
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="inferlab-sweep-vllm-") as scratch:
        model_dir = weights_dir_for_vllm(scratch)
        cli, env, version = vllm_cli(scratch)
        data = [os.path.join(scratch, f"prompts-{r}.json") for r in range(repeats)]
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(model_dir)
        n = [chat_dataset(log, p, r, tok) for r, p in enumerate(data)][0]
        if requests is not None:
            if not (isinstance(requests, int) and 0 < requests <= n):
                raise InvalidInputError(f"requests must be 1..{n} (the log's requests), "
                                        f"got {requests!r}")
            n = requests
        timeout = 300 + n * (0.5 * output_len + 2 / rate)
        for i, fl in enumerate(flags):
            with contextlib.ExitStack() as up:
                srv = {"inferlab": inferlab_server(MODEL_NAME, free_port(),
                                                   f"{scratch}/inferlab-{i}.log",
                                                   BASE["max_num_seqs"], BASE["max_model_len"],
                                                   fl["inferlab"]),
                       "vLLM": vllm_server(model_dir, MODEL_NAME, free_port(),
                                           f"{scratch}/vllm-{i}.log", scratch,
                                           BASE["max_num_seqs"], BASE["max_model_len"],
                                           fl["vLLM"])}
                for s in srv.values():
                    up.callback(s.stop)
                    s.launch()
                up.enter_context(reaped([s.pgid for s in srv.values()]))
                servers_cmd[i] = {k: shlex.join(s.argv) for k, s in srv.items()}
                say(f"point {i} {knobs[i]}: starting both servers ...")
                for name, s in srv.items():
                    try:
                        s.wait_ready()
                    except ServerFailed as e:
                        errors[(i, name)] = _why(e)
                        say(f"  {name} did not start: {errors[(i, name)]}")
                live = {k: s for k, s in srv.items() if (i, k) not in errors}
                with contextlib.suppress(ServerFailed):
                    greedy[i] = greedy_agreement({k: s.url for k, s in live.items()}, 1, 8)
                for rep in range(repeats):
                    for name, s in live.items():
                        if (i, name) in errors:
                            continue
                        fname = f"{name}-{i}-{rep}.json"
                        argv = client_command(cli, s.url, model_dir, rate, seed + rep, n, 0,
                                              output_len, scratch, fname, dataset=[
                                                  "--dataset-name", "sharegpt", "--dataset-path",
                                                  data[rep], "--sharegpt-output-len",
                                                  str(output_len)])
                        with contextlib.ExitStack() as idle:
                            for other in live.values():
                                if other is not s:
                                    idle.enter_context(other.frozen())
                            c0, b0 = s.cpu_seconds(), protocol.cpu_busy_seconds()
                            try:
                                wall, client_cpu = run_client(argv, env,
                                                              f"{scratch}/client.log", timeout)
                            except ServerFailed as e:
                                errors[(i, name)] = _why(e)
                                say(f"  {name} repeat {rep + 1}: {errors[(i, name)]}")
                                continue
                            finally:
                                server_cpu = s.cpu_seconds() - c0
                            b1 = protocol.cpu_busy_seconds()
                        mine = server_cpu + client_cpu
                        other_s = protocol.others_cpus(b0, b1, mine, wall)
                        own, timed = own + mine, timed + wall
                        others += (other_s or 0.0) * wall
                        times.setdefault(f"point {i} {name}", []).append(wall)
                        nums = client_numbers(os.path.join(scratch, fname))
                        if nums["error"]:
                            errors[(i, name)] = nums["error"]
                        runs.append({"point": i, "server": name, "repeat": rep,
                                     "seed": seed + rep, "command": shlex.join(argv),
                                     "numbers": nums, "server_cpu_s": server_cpu,
                                     "client_cpu_s": client_cpu, "client_wall_s": wall})
                        say(f"  {name:8s} repeat {rep + 1}: {nums['output_tok_s']:.1f} tok/s, "
                            f"{nums['users']} users, TTFT p50 {nums['ttft_p50_ms']:.0f} ms")
    rows = {name: [_row(i, knobs[i], name, runs, errors) for i in range(len(points))]
            for name in ENGINES}
    others_avg = others / timed if timed else None
    warning = " ".join(w for w in (
        protocol.others_warning(others_avg, protocol.cpus(),
                                "the servers' and the client's", "tokens/s"),
        protocol.repeat_warning(times)) if w) or None
    return portable({
        **protocol.result_meta(command or "inferlab.lab.sweep_vllm.measure_pair(...)"),
        "format": FORMAT, "version": VERSION, "clock": CLOCK, "warning": warning,
        "label": (f"wall clock, this machine: median and range of {repeats} repeats, "
                  "inferlab and vLLM interleaved at each point (A B A B)"),
        "results": {"engines": rows, "runs": runs, "greedy": greedy, "servers": servers_cmd,
                    "config": {"log": log, "requests": n, "rate": rate,
                               "output_len": output_len, "repeats": repeats, "seed": seed,
                               "base": BASE, "model": MODEL_NAME, "model_dir": model_dir,
                               "dtype": "float32", "vllm_version": version},
                    "readings": {"others_cpus": others_avg, "own_cpu_s": own,
                                 "timed_wall_s": timed, "run_seconds": times,
                                 "load_before": load_before,
                                 "load_after": os.getloadavg()[0]}}})


def _row(i: int, knobs: dict, name: str, runs: list, errors: dict) -> dict:
    mine = [r["numbers"] for r in runs if r["point"] == i and r["server"] == name]
    err = errors.get((i, name))
    return row(i, knobs, metrics=None if err or not mine else point_metrics(mine),
               trace_path=None, error=err, clock=CLOCK, projection=False)

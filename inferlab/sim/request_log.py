"""Workloads from a request log: replay an analyst's own traffic through the lab's engine.

A request log is JSON Lines (``.jsonl``, ``.ndjson`` or ``.json``: one JSON object per line,
blank lines skipped) or CSV (``.csv``: a header row, then one request per row; ``messages``
and ``tools`` cells hold JSON text, an empty cell is an absent field). One request per line:

``arrival_s``     seconds from the start of the log, a number >= 0. Optional: when no row has
                  it, every request arrives at once; when some rows have it, all must.
                  Rows need not be in order: they are sorted by arrival (ties keep the
                  file's order) and the workload's description says so.
``prompt``        the prompt text, or a list of token ids (as the completions API takes it;
                  in CSV, a cell that parses as a JSON list of ints);
``messages``      an OpenAI chat list (``[{"role", "content"}, ...]``), rendered by the
                  tokenizer's chat template, as ``Engine.add_request`` renders it; with an
                  optional ``tools`` list (OpenAI's tool definitions) rendered with it, as
                  ``inferlab serve`` renders a request that carries tools;
``prompt_tokens`` a prompt length only (an int >= 1), for logs that kept lengths: that many
                  random token ids, drawn from ``seed`` (same seed, same ids).
                  Exactly one of ``prompt``, ``messages``, ``prompt_tokens`` per row.
``max_tokens``    the answer's token limit, an int >= 1 (lowered to ``max_tokens_cap``).
``ignore_eos``    optional bool. Default false for ``prompt``/``messages`` (the answer ends
                  at the model's end-of-sequence, ``max_tokens`` is a cap) and true for
                  ``prompt_tokens`` (random tokens: the answer is exactly ``max_tokens``
                  long, the output length the log kept).
``id``            optional request id (a string or an int); default ``line-N``. Unique.

Other fields are ignored, so a log with more columns (latencies, users) loads as it is. A
bad row raises :class:`InvalidInputError` naming the file, the line and the problem; so
does a file with no request. ``inferlab serve --record-requests PATH`` writes this format.

The shipped example, ``inferlab/sim/data/request_log_example.jsonl``, is the bundled chat
requests with Poisson arrivals at ``EXAMPLE_RATE`` requests/s, written by
``write_example`` (``python -m inferlab.sim.request_log example PATH`` rewrites it).
"""
from __future__ import annotations

import csv
import json
import math
import pathlib
import sys
from importlib import resources

import numpy as np

from ..core.prompts import check_messages, check_tools, render_messages, to_token_ids
from ..errors import InvalidInputError, check_type
from .chat_requests import bundled
from .workloads import Poisson, Workload, WorkloadRequest

SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}
SOURCES = ("prompt", "messages", "prompt_tokens")
EXAMPLE_RATE = 2.0            # requests/s of the shipped example's Poisson arrivals
EXAMPLE_REQUESTS = 36
EXAMPLE_MAX_TOKENS = 128
LOW_TOKEN = 3                 # random ids skip the lowest ones (special tokens), as synthetic()


def example_path() -> pathlib.Path:
    """The request log shipped with the package."""
    return pathlib.Path(str(resources.files("inferlab.sim").joinpath(
        "data/request_log_example.jsonl")))


def _rows(path: pathlib.Path):
    """(line number, dict of fields) per request row; raises on unparseable lines."""
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise InvalidInputError(f"{path}: a request log must end in one of {sorted(SUFFIXES)} "
                                f"(JSON Lines or CSV), got {path.suffix!r}")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: no such request log") from None
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if kind == "jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InvalidInputError(f"{path}, line {n}: not valid JSON ({e.msg} at column "
                                        f"{e.colno})") from None
            if not isinstance(row, dict):
                raise InvalidInputError(f"{path}, line {n}: a request must be a JSON object, "
                                        f"got {type(row).__name__}")
            yield n, row
        return
    reader = csv.DictReader(text.splitlines(keepends=True))
    start = 2
    for raw in reader:
        n, start = start, reader.line_num + 1
        if None in raw:
            raise InvalidInputError(f"{path}, line {n}: more cells than the header's "
                                    f"{len(reader.fieldnames)} columns")
        row = {}
        for k, v in raw.items():
            k = k.strip()
            if v is None or v == "":
                continue
            ids = k == "prompt" and v.lstrip()[:1] == "["     # token ids, if it parses
            if k in ("messages", "tools", "ignore_eos") or ids:
                try:
                    v = json.loads(v)
                except json.JSONDecodeError as e:
                    if k != "prompt":
                        raise InvalidInputError(f"{path}, line {n}: the {k} cell is not valid "
                                                f"JSON ({e.msg})") from None
            elif k in ("arrival_s", "max_tokens", "prompt_tokens"):
                v = _number(v)
            row[k] = v
        if row:
            yield n, row


def _number(s: str):
    """A CSV cell as an int or a float (left as text when it is neither: the check says so)."""
    for t in (int, float):
        try:
            return t(s)
        except ValueError:
            pass
    return s


def _positive_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _request(row: dict, n: int, tokenizer, vocab: int | None, rng, cap):
    """One row as (WorkloadRequest, arrival or None); raises ValueError with the problem."""
    given = [k for k in SOURCES if k in row]
    if len(given) != 1:
        raise ValueError(f"give exactly one of {', '.join(SOURCES)}" +
                         (f"; this row has {' and '.join(given)}" if given else ""))
    if "max_tokens" not in row:
        raise ValueError("max_tokens is missing")
    mt = row["max_tokens"]
    if not _positive_int(mt):
        raise ValueError(f"max_tokens must be a positive int, got {mt!r}")
    arrival = row.get("arrival_s")
    if arrival is not None and (isinstance(arrival, bool) or not isinstance(arrival, (int, float))
                                or not math.isfinite(arrival) or arrival < 0):
        raise ValueError(f"arrival_s must be a number of seconds >= 0, got {arrival!r}")
    rid = row.get("id", f"line-{n}")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)) or rid == "":
        raise ValueError(f"id must be a non-empty string or an int, got {rid!r}")
    if "tools" in row and given[0] != "messages":
        raise ValueError("tools go with messages only")
    src, val = given[0], row[given[0]]
    ignore_eos = row.get("ignore_eos", src == "prompt_tokens")
    if not isinstance(ignore_eos, bool):
        raise ValueError(f"ignore_eos must be true or false, got {ignore_eos!r}")
    messages = None
    if src == "prompt_tokens":
        if not _positive_int(val):
            raise ValueError(f"prompt_tokens must be a positive int (a length), got {val!r}")
        if vocab is None:
            raise ValueError("prompt_tokens needs a vocabulary: pass the tokenizer or vocab_size")
        ids = rng.integers(LOW_TOKEN, vocab, size=val).tolist()
    elif src == "prompt":
        if not (isinstance(val, str) or (isinstance(val, list) and all(
                isinstance(t, int) and not isinstance(t, bool) for t in val))):
            raise ValueError(f"prompt must be text or a list of token ids, got {val!r:.60}")
        if isinstance(val, str) and tokenizer is None:
            raise ValueError("a text prompt needs the model's tokenizer")
        ids = to_token_ids(val, tokenizer, vocab if vocab is not None else 2 ** 31)[0]
    else:
        if not isinstance(val, list) or not val:
            raise ValueError("messages must be a non-empty list of {role, content} objects")
        check_messages(val)
        if tokenizer is None:
            raise ValueError("messages need the model's tokenizer (its chat template)")
        if "tools" in row:
            if not isinstance(row["tools"], list):
                raise ValueError("tools must be a list of OpenAI tool definitions")
            check_tools(row["tools"])
            # as the server does it: the template's text, sent as a plain prompt
            ids = to_token_ids(render_messages(val, tokenizer, row["tools"]), tokenizer, vocab)[0]
        else:
            ids, messages = to_token_ids(val, tokenizer, vocab)[0], val
    if not ids:
        raise ValueError(f"{src} is empty")
    mt = min(mt, cap) if cap is not None else mt
    return WorkloadRequest(str(rid), ids, mt, float(arrival or 0.0), messages=messages,
                           ignore_eos=ignore_eos), arrival


def workload_from_log(path, tokenizer=None, *, max_tokens_cap: int | None = None,
                      seed: int = 0, vocab_size: int | None = None,
                      name: str | None = None) -> Workload:
    """The requests of the log at ``path`` (JSON Lines or CSV, see the module docstring) as a
    :class:`Workload`, the object ``run_workload``, the Lab and the sweep play, sorted by
    arrival. ``tokenizer``: the engine's (``eng.tokenizer``), needed for text and messages;
    ``max_tokens_cap`` lowers every ``max_tokens`` above it; ``seed`` draws the ids of
    ``prompt_tokens`` rows; ``vocab_size`` (default ``len(tokenizer)``) bounds token ids."""
    path = pathlib.Path(path)
    if max_tokens_cap is not None and not _positive_int(max_tokens_cap):
        raise InvalidInputError(f"max_tokens_cap must be an int >= 1 or None, got "
                                f"{max_tokens_cap!r}")
    check_type("seed", seed, int, "an int")
    vocab = vocab_size if vocab_size is not None else (
        len(tokenizer) if tokenizer is not None else None)
    rng = np.random.default_rng(seed)
    reqs, arrivals, lines, seen = [], [], [], {}
    for n, row in _rows(path):
        try:
            req, arrival = _request(row, n, tokenizer, vocab, rng, max_tokens_cap)
        except (ValueError, TypeError) as e:      # InferlabError's two kinds included
            raise InvalidInputError(f"{path}, line {n}: {e}") from None
        if req.request_id in seen:
            raise InvalidInputError(f"{path}, line {n}: id {req.request_id!r} is already used "
                                    f"on line {seen[req.request_id]}")
        if arrivals and (arrival is None) != (arrivals[0] is None):
            here, there = ("missing", "given") if arrival is None else ("given", "missing")
            raise InvalidInputError(f"{path}, line {n}: arrival_s is {here} here but {there} "
                                    f"on line {lines[0]}: give it on every row or on none")
        seen[req.request_id] = n
        reqs.append(req)
        arrivals.append(arrival)
        lines.append(n)
    if not reqs:
        raise InvalidInputError(f"{path}: the request log holds no request")
    order = sorted(range(len(reqs)), key=lambda i: reqs[i].arrival_time)   # stable
    resorted = order != list(range(len(reqs)))
    reqs = [reqs[i] for i in order]
    span = reqs[-1].arrival_time - reqs[0].arrival_time
    when = ("all at once" if arrivals[0] is None else
            f"over {span:.1f} s as logged" + (" (sorted by arrival: the file was not)"
                                               if resorted else ""))
    cap = f", max_tokens capped at {max_tokens_cap}" if max_tokens_cap is not None else ""
    desc = f"{len(reqs)} requests from the log {path.name}, arriving {when}{cap}"
    return Workload(name or f"log {path.name}", reqs, desc, seed)


# --- the shipped example ----------------------------------------------------------------
def example_rows(num_requests: int = EXAMPLE_REQUESTS, *, rate: float = EXAMPLE_RATE,
                 max_tokens: int = EXAMPLE_MAX_TOKENS, seed: int = 0) -> list[dict]:
    """The example log's rows: bundled chat requests (shuffled by ``seed``, cycled if more
    are asked for) arriving as a Poisson process at ``rate`` requests/s."""
    check_type("num_requests", num_requests, int, "an int >= 1")
    if num_requests < 1 or not rate > 0 or not _positive_int(max_tokens):
        raise InvalidInputError("num_requests and max_tokens must be >= 1 and rate > 0, got "
                                f"{num_requests}, {max_tokens}, {rate}")
    pool = bundled()
    rng = np.random.default_rng(seed)
    order = [pool[i] for _ in range(-(-num_requests // len(pool)))
             for i in rng.permutation(len(pool))][:num_requests]
    times = Poisson(rate).sample(rng, num_requests)
    return [{"id": f"{item['id']}-{k}", "arrival_s": round(float(times[k]), 3),
             "messages": item["messages"], "max_tokens": max_tokens}
            for k, item in enumerate(order)]


def write_example(path=None, **kw) -> pathlib.Path:
    """Write ``example_rows(**kw)`` as JSON Lines to ``path`` (default: the shipped file)."""
    path = pathlib.Path(path) if path is not None else example_path()
    with open(path, "w", encoding="utf-8") as f:
        for row in example_rows(**kw):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


if __name__ == "__main__":             # python -m inferlab.sim.request_log example [PATH]
    if sys.argv[1:2] != ["example"]:
        sys.exit("usage: python -m inferlab.sim.request_log example [PATH]")
    print(write_example(sys.argv[2] if len(sys.argv) > 2 else None))

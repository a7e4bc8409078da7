"""Seeded synthetic workloads, and the loop that plays one through an engine.

A workload is a list of requests with arrival times (seconds from the start of the run,
on the engine clock). Lengths come from a distribution (fixed, uniform, or the capped
exponential of the published continuous-batching benchmark); arrivals all at once, as a
Poisson process, or gamma-distributed gaps whose coefficient of variation sets burstiness.

Multi-turn chats and agent loops cannot be written down in advance: turn k re-sends the
whole conversation, including the model's answer to turn k-1, which only exists at run
time. So a follow-up request names its ``parent`` and carries only its *new* tokens (the
user's next message, the tool's result); ``run_workload`` builds its prompt as
parent prompt + parent output + new tokens and lets it arrive ``think_time`` after the
parent finished. Same seed, same workload, token for token.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidInputError, InvalidTypeError, check_type


# --- distributions ---------------------------------------------------------------------
@dataclass(slots=True, frozen=True)
class Fixed:
    n: int

    def sample(self, rng, size):
        return np.full(size, self.n, dtype=np.int64)

    @property
    def expected(self) -> float:
        return float(self.n)

    @property
    def bounds(self) -> tuple[int, int]:
        return self.n, self.n


@dataclass(slots=True, frozen=True)
class Uniform:
    low: int
    high: int                      # inclusive

    def sample(self, rng, size):
        return rng.integers(self.low, self.high + 1, size=size)

    @property
    def expected(self) -> float:
        return (self.low + self.high) / 2

    @property
    def bounds(self) -> tuple[int, int]:
        return self.low, self.high


@dataclass(slots=True, frozen=True)
class CappedExponential:
    """Exponential with ``mean``, rounded, at least ``min``, at most ``cap`` (capping lowers
    the realised mean to ``expected``)."""

    mean: float
    cap: int
    min: int = 1

    def sample(self, rng, size):
        x = np.rint(rng.exponential(self.mean, size=size)).astype(np.int64)
        return np.clip(x, self.min, self.cap)

    @property
    def expected(self) -> float:
        # E[min(X, cap)] for X ~ Exp(mean): mean * (1 - exp(-cap / mean)) (ignoring rounding)
        return float(self.mean * (1 - np.exp(-self.cap / self.mean)))

    @property
    def bounds(self) -> tuple[int, int]:
        return self.min, self.cap


@dataclass(slots=True, frozen=True)
class AllAtOnce:
    def sample(self, rng, size):
        return np.zeros(size)


@dataclass(slots=True, frozen=True)
class Poisson:
    """Arrivals at ``rate`` requests/s with exponential gaps (memoryless traffic)."""

    rate: float

    def sample(self, rng, size):
        return np.cumsum(rng.exponential(1.0 / self.rate, size=size))


@dataclass(slots=True, frozen=True)
class Gamma:
    """Mean ``rate`` requests/s; gaps gamma-distributed with coefficient of variation ``cv``
    (cv=1 is Poisson, cv>1 bursty: clumps of arrivals separated by long quiet gaps)."""

    rate: float
    cv: float = 2.0

    def sample(self, rng, size):
        shape = 1.0 / self.cv ** 2
        return np.cumsum(rng.gamma(shape, 1.0 / (self.rate * shape), size=size))


def _lengths(spec, name):
    if isinstance(spec, bool):
        raise InvalidTypeError(f"{name} must be an int or Fixed/Uniform/CappedExponential")
    if isinstance(spec, (int, np.integer)):
        spec = Fixed(int(spec))
    if not isinstance(spec, (Fixed, Uniform, CappedExponential)):
        raise InvalidTypeError(f"{name} must be an int or Fixed/Uniform/CappedExponential, "
                                f"got {spec!r}")
    lo, hi = spec.bounds
    if isinstance(spec, CappedExponential) and not spec.mean > 0:
        raise InvalidInputError(f"{name} mean must be > 0, got {spec!r}")
    if lo < 1 or hi < lo:
        raise InvalidInputError(f"{name} lengths must be >= 1 with low <= high, got {spec!r}")
    return spec


def arrival_spec(spec):
    if spec is None:
        return AllAtOnce()
    if not isinstance(spec, (AllAtOnce, Poisson, Gamma)):
        raise InvalidTypeError("arrival must be None, AllAtOnce(), Poisson(rate) or "
                                f"Gamma(rate, cv), got {spec!r}")
    if isinstance(spec, (Poisson, Gamma)) and not spec.rate > 0:
        raise InvalidInputError(f"arrival rate must be > 0 requests/s, got {spec.rate}")
    if isinstance(spec, Gamma) and not spec.cv > 0:
        raise InvalidInputError(f"Gamma cv must be > 0, got {spec.cv}")
    return spec


# --- the workload ------------------------------------------------------------------------
@dataclass(slots=True)
class WorkloadRequest:
    request_id: str
    prompt_token_ids: list[int]      # the whole prompt; for a follow-up, only its new tokens
    max_tokens: int
    arrival_time: float = 0.0        # seconds from run start (ignored for follow-ups)
    parent: str | None = None        # follow-up of this request (chat turn, agent step)
    think_time: float = 0.0          # follow-up arrives this long after the parent finished
    session: str | None = None
    messages: list | None = None     # a real chat request: sent as messages (rendered by the
                                     # engine's template into prompt_token_ids)
    ignore_eos: bool = True          # False: the answer ends at EOS (max_tokens is a cap)


@dataclass(slots=True)
class Workload:
    name: str
    requests: list[WorkloadRequest]
    description: str = ""
    seed: int | None = None

    def __post_init__(self):
        seen = set()
        for r in self.requests:
            if r.request_id in seen:
                raise InvalidInputError(f"duplicate request_id {r.request_id!r} in workload")
            if r.parent is not None and r.parent not in seen:
                raise InvalidInputError(f"request {r.request_id!r} follows {r.parent!r}, "
                                        "which must come earlier in the workload")
            if r.max_tokens < 1:
                raise InvalidInputError(f"max_tokens of {r.request_id!r} must be >= 1")
            seen.add(r.request_id)

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self):
        return iter(self.requests)

    def summary(self) -> dict:
        roots = [r for r in self.requests if r.parent is None]
        arr = [r.arrival_time for r in roots]
        mean = lambda xs: float(np.mean(xs)) if xs else 0.0
        return {"name": self.name, "num_requests": len(self.requests),
                "num_follow_ups": len(self.requests) - len(roots),
                "mean_prompt_tokens": mean([len(r.prompt_token_ids) for r in roots]),
                "mean_max_tokens": mean([r.max_tokens for r in self.requests]),
                "arrival_span": (max(arr) - min(arr)) if arr else 0.0, "seed": self.seed}

    def __repr__(self) -> str:
        s = self.summary()
        return (f"Workload({self.name!r}: {s['num_requests']} requests, "
                f"{s['num_follow_ups']} follow-ups, prompt ~{s['mean_prompt_tokens']:.0f} tok "
                f"(first turns), output <= ~{s['mean_max_tokens']:.0f} tok, "
                f"arrivals over {s['arrival_span']:.2f} s, seed={self.seed})")


def _tokens(rng, n, vocab_size, low):
    return rng.integers(low, vocab_size, size=int(n)).tolist()


def _check_common(vocab_size, low, seed):
    check_type("vocab_size", vocab_size, int, "an int")
    check_type("low", low, int, "an int")
    if not 0 <= low < vocab_size:
        raise InvalidInputError(f"token ids are drawn from [low, vocab_size): need 0 <= low < "
                                f"vocab_size, got low={low}, vocab_size={vocab_size}")
    check_type("seed", seed, int, "an int")
    return np.random.default_rng(seed)


def synthetic(num_requests: int, *, prompt_len=128, output_len=CappedExponential(64, 128),
              arrival=None, shared_prefix: float = 0.0, prefix_groups: int = 1,
              vocab_size: int = 49152, low: int = 3, seed: int = 0,
              name: str | None = None) -> Workload:
    """Independent requests. ``shared_prefix``: the fraction of each prompt that is a prefix
    common to its group (``prefix_groups`` distinct prefixes, e.g. system prompts)."""
    check_type("num_requests", num_requests, int, "an int >= 1")
    if num_requests < 1:
        raise InvalidInputError(f"num_requests must be >= 1, got {num_requests}")
    if not 0.0 <= shared_prefix <= 1.0:
        raise InvalidInputError(f"shared_prefix must be a fraction in [0, 1], got {shared_prefix}")
    if prefix_groups < 1:
        raise InvalidInputError(f"prefix_groups must be >= 1, got {prefix_groups}")
    rng = _check_common(vocab_size, low, seed)
    p_spec, o_spec = _lengths(prompt_len, "prompt_len"), _lengths(output_len, "output_len")
    a_spec = arrival_spec(arrival)
    p_lens, o_lens = p_spec.sample(rng, num_requests), o_spec.sample(rng, num_requests)
    times = a_spec.sample(rng, num_requests)
    longest = int(p_lens.max())
    prefixes = [_tokens(rng, longest, vocab_size, low) for _ in range(prefix_groups)]
    reqs = []
    for i in range(num_requests):
        n_pre = int(round(shared_prefix * p_lens[i]))
        ids = prefixes[i % prefix_groups][:n_pre] + _tokens(rng, p_lens[i] - n_pre, vocab_size, low)
        reqs.append(WorkloadRequest(f"r{i}", ids, int(o_lens[i]), float(times[i])))
    desc = (f"{num_requests} requests, prompt {p_spec}, output {o_spec}, arrivals {a_spec}"
            + (f", {shared_prefix:.0%} shared prefix ({prefix_groups} group(s))"
               if shared_prefix else ""))
    return Workload(name or "synthetic", reqs, desc, seed)


def _sessions(ids, num, turns, *, system_len, first_len, follow_len, output_len, think_time,
              arrival, vocab_size, low, seed):
    check_type("num_sessions", num, int, "an int >= 1")
    check_type("turns", turns, int, "an int >= 1")
    if num < 1 or turns < 1:
        raise InvalidInputError(f"num_sessions and turns must be >= 1, got {num}, {turns}")
    if think_time < 0:
        raise InvalidInputError(f"think_time must be >= 0 seconds, got {think_time}")
    if system_len < 0:
        raise InvalidInputError(f"the shared system/tools prompt length must be >= 0, "
                                f"got {system_len}")
    rng = _check_common(vocab_size, low, seed)
    f_spec, u_spec, o_spec = (_lengths(first_len, "first_len"), _lengths(follow_len, "follow_len"),
                              _lengths(output_len, "output_len"))
    starts = arrival_spec(arrival).sample(rng, num)
    system = _tokens(rng, system_len, vocab_size, low)   # shared by every session
    reqs = []
    for s in range(num):
        parent = None
        for t in range(turns):
            rid = f"{ids[0]}{s}{ids[1]}{t}"
            if t == 0:
                prompt = system + _tokens(rng, f_spec.sample(rng, 1)[0], vocab_size, low)
            else:
                prompt = _tokens(rng, u_spec.sample(rng, 1)[0], vocab_size, low)
            reqs.append(WorkloadRequest(rid, prompt, int(o_spec.sample(rng, 1)[0]),
                                        0.0 if t else float(starts[s]), parent,
                                        float(think_time) if t else 0.0, f"{ids[0]}{s}"))
            parent = rid
    return reqs


def chat_sessions(num_sessions: int, turns: int = 4, *, system_prompt_len: int = 64,
                  user_len=Uniform(16, 64), output_len=CappedExponential(64, 128),
                  think_time: float = 1.0, arrival=None, vocab_size: int = 49152, low: int = 3,
                  seed: int = 0) -> Workload:
    """Multi-turn chats: each turn re-sends the whole history plus a new user message."""
    reqs = _sessions(("s", "t"), num_sessions, turns, system_len=system_prompt_len,
                     first_len=user_len, follow_len=user_len, output_len=output_len,
                     think_time=think_time, arrival=arrival, vocab_size=vocab_size, low=low,
                     seed=seed)
    return Workload("chat", reqs, f"{num_sessions} chat sessions x {turns} turns, system prompt "
                    f"{system_prompt_len} tok, user {user_len}, think {think_time} s", seed)


def agent_loops(num_tasks: int, tool_calls: int = 3, *, tools_prompt_len: int = 256,
                task_len=Uniform(32, 96), tool_result_len=Uniform(32, 128),
                output_len=Uniform(16, 48), tool_latency: float = 0.5, arrival=None,
                vocab_size: int = 49152, low: int = 3, seed: int = 0) -> Workload:
    """Agent loops: the model answers with a tool call, the tool's result is appended and the
    model is called again, ``tool_calls`` times, each call re-sending everything so far."""
    reqs = _sessions(("a", "c"), num_tasks, tool_calls + 1, system_len=tools_prompt_len,
                     first_len=task_len, follow_len=tool_result_len, output_len=output_len,
                     think_time=tool_latency, arrival=arrival, vocab_size=vocab_size, low=low,
                     seed=seed)
    return Workload("agent", reqs, f"{num_tasks} agent tasks x {tool_calls} tool calls, tool "
                    f"definitions {tools_prompt_len} tok, tool results {tool_result_len}, "
                    f"tool latency {tool_latency} s", seed)


# --- playing a workload through an engine -------------------------------------------------
def run_workload(engine, workload: Workload, *, progress: bool = True) -> list:
    """Submit every request at its arrival time (offset by the engine's current time), step
    the engine until all are done, add each follow-up when its parent finishes. Returns the
    finished RequestOutputs in workload order."""
    from tqdm.auto import tqdm

    from inferlab.core.params import SamplingParams

    check_type("workload", workload, Workload, "a Workload")
    t0 = engine.now
    children = defaultdict(list)
    by_id = {}
    for r in workload.requests:
        by_id[r.request_id] = r
        if r.parent is not None:
            children[r.parent].append(r)

    def submit(r, prompt, arrival):
        engine.add_request(prompt, SamplingParams(max_tokens=r.max_tokens,
                                                  ignore_eos=r.ignore_eos),
                           request_id=r.request_id, arrival_time=arrival)

    for r in workload.requests:
        if r.parent is None:
            submit(r, list(r.messages) if r.messages else list(r.prompt_token_ids),
                   t0 + r.arrival_time)
    finished = {}
    with tqdm(total=len(workload), disable=not progress, desc=workload.name, unit="req") as bar:
        while engine.has_unfinished_requests():
            for out in engine.step():
                if not out.finished or out.request_id not in by_id:
                    continue
                finished[out.request_id] = out
                bar.update(1)
                end = out.metrics.finish_time if out.metrics.finish_time is not None else engine.now
                for child in children.get(out.request_id, ()):
                    history = list(out.prompt_token_ids) + list(out.token_ids)
                    submit(child, history + list(child.prompt_token_ids), end + child.think_time)
    return [finished[r.request_id] for r in workload.requests if r.request_id in finished]

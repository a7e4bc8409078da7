"""The per-step report that inferlab's stat-logger plugin sends out of a vLLM server.

One schema for both ends: the plugin (``plugin.stat_logger``, inside vLLM's venv) encodes these
Structs as msgpack and publishes them on a ZMQ PUB socket; the connector (the lab's venv, no
vLLM) decodes them, checking every field. No vLLM import here.

    StepReport   one engine step: batch counts, queue lengths, KV usage, prefix-cache
                 lookups, tokens out, requests finished
    EngineInfo   the server's shape (block size, number of KV blocks, limits, vLLM version),
                 sent when the engine starts and then every ``HEARTBEAT_S`` seconds, so a
                 connector that joins late learns it and can tell a silent server from an
                 idle one

The plugin reads vLLM's ``SchedulerStats`` and ``IterationStats``, which vLLM documents as
"not stable interfaces": the fields it reads were checked against ``PINNED_VLLM`` (a test
holds them, tests/test_connect_plugin.py), and a server of another version is reported.
"""
from __future__ import annotations

from typing import Union

import msgspec

PINNED_VLLM = "0.32.0"                  # the vLLM release the plugin's field reads were checked on
TOPIC = b"inferlab-steps"
HEARTBEAT_S = 1.0
ENV_ENDPOINT = "INFERLAB_VLLM_STEPS_ENDPOINT"   # where the plugin binds its PUB socket


class Finished(msgspec.Struct, omit_defaults=True):
    """A request that finished in this step, as vLLM's FinishedRequestStats tells it."""

    request_id: str
    finish_reason: str
    num_prompt_tokens: int = 0
    num_generation_tokens: int = 0
    num_cached_tokens: int = 0
    e2e: float = 0.0
    queued: float = 0.0
    prefill: float = 0.0
    decode: float = 0.0


class StepReport(msgspec.Struct, tag="step", omit_defaults=True):
    engine: int                     # data-parallel engine index
    seq: int                        # the plugin's message counter (gaps = lost reports)
    ts: float                       # server time.time() when the step's outputs were handled
    num_running: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0           # fraction of KV blocks in use
    prefix_requests: int = 0        # prefix-cache lookups this step: requests,
    prefix_queries: int = 0         # ... prompt tokens looked up,
    prefix_hits: int = 0            # ... and tokens found cached
    prefix_reset: bool = False      # reset_prefix_cache() happened
    # scheduled this step (vLLM's --enable-logging-iteration-details; None without it)
    ctx_requests: Union[int, None] = None
    ctx_tokens: Union[int, None] = None       # prefill tokens (prompts and their chunks)
    gen_requests: Union[int, None] = None
    gen_tokens: Union[int, None] = None       # decode tokens
    elapsed_ms: Union[float, None] = None     # the model step, measured by vLLM
    # what came out (IterationStats)
    new_tokens: int = 0             # tokens sampled this step, all requests
    prompt_tokens: int = 0          # prompts whose prefill completed: total tokens,
    prompt_computed: int = 0        # ... computed,
    prompt_cached: int = 0          # ... served from the prefix cache
    num_preempted: int = 0
    finished: list[Finished] = []


class EngineInfo(msgspec.Struct, tag="engine", omit_defaults=True):
    seq: int
    ts: float
    vllm_version: str
    model: str = ""
    block_size: int = 0
    num_blocks: int = 0             # KV blocks per engine (vLLM's num_gpu_blocks)
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    max_model_len: int = 0
    prefix_caching: bool = False
    chunked_prefill: bool = False
    engines: list[int] = []
    iteration_details: bool = False
    pid: int = 0


Message = Union[StepReport, EngineInfo]
_decoder = msgspec.msgpack.Decoder(Message)
_encoder = msgspec.msgpack.Encoder()


def encode(msg: Message) -> bytes:
    return _encoder.encode(msg)


def decode(payload: bytes) -> Message:
    """A report from its bytes; raises ``msgspec.ValidationError``/``DecodeError`` when bad."""
    return _decoder.decode(payload)

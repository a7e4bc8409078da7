"""``inferlab serve``: the engine behind the OpenAI API, in the foreground (Ctrl-C stops)."""
from __future__ import annotations

import argparse
import os
import pathlib


def add_arguments(p) -> None:
    p.add_argument("--model", default=None, help="None = SmolLM2-135M-Instruct; 'tiny'; a path")
    p.add_argument("--served-model-name", default=None,
                   help="the name clients send as 'model' (default: the engine's model name)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; any "
                   "other address needs --api-key)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=os.environ.get("INFERLAB_API_KEY"),
                   help="clients must send 'Authorization: Bearer KEY' (default: "
                   "$INFERLAB_API_KEY; required when --host is not a loopback address)")
    p.add_argument("--max-num-seqs", type=int, default=None,
                   help="requests the engine runs at once (the rest wait)")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--num-blocks", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None,
                   help="tokens one engine step may schedule (vLLM's flag of that name)")
    p.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction,
                   default=None, help="split long prompts over steps (default on)")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                   default=None, help="reuse KV blocks of a prompt prefix seen before "
                   "(default on)")
    p.add_argument("--long-prefill-token-threshold", type=int, default=None,
                   help="prompt tokens per request per step (0 = off, the default)")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="weights, KV cache and activations (default: the engine's)")
    p.add_argument("--max-pending", type=int, default=1024,
                   help="requests held at once, running or waiting; more get a 503")
    p.add_argument("--log-level", default="info")
    p.add_argument("--record-requests", default=None, metavar="PATH",
                   help="append each accepted request to this request log (JSON Lines: "
                   "arrival_s, messages or prompt, max_tokens, id), which "
                   "inferlab.sim.request_log.workload_from_log replays; off by default")
    p.add_argument("--timing", default=None, metavar="PATH",
                   help="append where each streamed request's time went (handler, driver, "
                   "engine step, hand-off, SSE write; JSON Lines, see inferlab.serve.timing) "
                   "to this file; off by default")


def run(args) -> int:
    from inferlab.engine import Engine

    from .server import Server, check_exposure
    check_exposure(args.host, args.api_key)          # before the model loads
    if args.record_requests is not None:
        from .record import last_arrival
        last_arrival(pathlib.Path(args.record_requests))   # a bad log path: before it too
    kw = {k: v for k, v in (("max_num_seqs", args.max_num_seqs),
                            ("max_model_len", args.max_model_len),
                            ("num_blocks", args.num_blocks),
                            ("max_num_batched_tokens", args.max_num_batched_tokens),
                            ("enable_chunked_prefill", args.enable_chunked_prefill),
                            ("enable_prefix_caching", args.enable_prefix_caching),
                            ("long_prefill_token_threshold", args.long_prefill_token_threshold),
                            ("dtype", args.dtype)) if v is not None}
    eng = Engine(args.model, block_size=args.block_size, **kw)
    srv = Server(eng, host=args.host, port=args.port, api_key=args.api_key,
                 model_name=args.served_model_name, max_pending=args.max_pending,
                 log_level=args.log_level, record_requests=args.record_requests,
                 timing=args.timing)
    print(f"inferlab serves {srv.model_name!r} at {srv.url} (OpenAI API; "
          f"auth {'on' if args.api_key else 'off'}). Ctrl-C stops.", flush=True)
    srv.serve_forever()
    return 0

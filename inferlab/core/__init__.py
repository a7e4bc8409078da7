"""core: the engine's bookkeeping, pure Python (no torch, no numba).

Requests and their state machine, sampling params, the engine config, the scheduler, the KV
managers and the block pool, step records and the event bus, outputs, stats, prompt forms and
incremental text. Rule: imports nothing of inferlab outside ``core/`` except the error types.
"""

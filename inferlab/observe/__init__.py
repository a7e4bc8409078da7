"""observe: what watches the engine from outside.

Trace recording, the trace file format, per-request lanes, Chrome trace export, run metrics.
Rule: consumes step records (and the public engine API); never reads engine internals.
Imports ``core/``, ``sim/`` and ``engine``.
"""

"""The front: what a notebook holds.

    connector   ``VllmConnector``: the engine-like surface over a running server (its feeds
                wired together, the socket pump, our requests)
    launcher    ``VllmServer``: start and stop ``vllm serve`` from vLLM's venv, KV events and
                step reports on
    machine     what the launcher needs from this machine: vLLM's venv, CPUs, ports, the model

Its one rule: the front imports ``feeds/`` and ``wire/`` (and ``core/``, ``observe/``); nothing
in ``connect/`` but the package's own ``__init__`` imports the front.
"""

"""The part of inferlab that runs INSIDE a vLLM server, in vLLM's venv.

    stat_logger   ``InferlabStepLogger``: one step report per engine step, out over ZMQ
                  (vLLM loads it by the entry point in pyproject.toml:
                  ``inferlab.connect.plugin.stat_logger:InferlabStepLogger``)

Its one rule: the plugin imports vLLM and ``wire/`` only, and nothing imports the plugin (the
lab's venv has no vLLM); the two sides share nothing but the wire format.
"""

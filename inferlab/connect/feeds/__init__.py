"""Feeds: each reads one source of a running vLLM server, or puts what they read together
into the lab's step records.

    kv_stream        KV event subscription: sequence gaps, replay, several DP ranks
    reports          step-report subscription (checked, gaps named); cache shape from /metrics
    request_streams  our requests: token streams, arrival times, results (``VllmResult``)
    tokens           ``TokenArrival``: one of our tokens as it arrived
    hash_tree        decoded KV events -> the lab's KVEvents (hash slots)
    prefix_tree      ``TreeState``: KVEvents folded back into vLLM's prefix tree (``KV_IDS``)
    assembler        ``StepAssembler``: StepRecords from step reports, KV events and tokens

Its one rule: a feed imports only ``core/``, ``wire/`` and other feeds (never ``front/`` or
``plugin/``): a feed is driven by the connector, it does not drive.
"""

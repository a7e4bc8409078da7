"""bench: the ``inferlab bench ...`` benchmarks only; what they share is in common.py. Rule:
may import anything; nothing in the package imports it but the CLI.
"""

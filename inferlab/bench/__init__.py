"""bench: the ``inferlab bench ...`` commands, and the JupyterLab + browser launch they share
with the tests. Rule: may import anything; nothing in the package imports it but the CLI.
"""

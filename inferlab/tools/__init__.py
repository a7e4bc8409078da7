"""tools: what runs the lab from outside rather than measuring it: JupyterLab + a headless
browser, started one way for the tests and the browser benchmark (jupyter.py), the README's
screenshots (showcase.py), and README's and BENCHMARKS' tables rendered from the result files
in docs/results/ (results.py, `inferlab results render|check`). Rule: may import anything but
``bench/``; the widgets and the floors below them never import it.
"""

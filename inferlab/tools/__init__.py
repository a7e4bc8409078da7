"""tools: what runs the lab from outside rather than measuring it: JupyterLab + a headless
browser, started one way for the tests and the browser benchmark (jupyter.py), and the
README's screenshots (showcase.py). Rule: may import anything but ``bench/``; the widgets
and the floors below them never import it.
"""

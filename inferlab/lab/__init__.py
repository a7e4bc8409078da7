"""lab: the guided lab's chapters, claims, figures and their export, comparisons.

Rule: may import anything but the views; only ``widgets/`` and the command line import it.
"""

"""sim: GPU profiles, the roofline cost model, clocks and seeded workloads.

The engine sees this floor only through the small ``Clock`` interface (``sim.clock``).
Rule: imports only ``core/``.
"""

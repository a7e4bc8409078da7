"""The KV map's words: a size in binary units, the waste sentence of its title, and the
memory the slots and the waste take at the engine's bytes per token."""
from __future__ import annotations


def size(nbytes: float) -> str:
    """'18 KiB', '2.3 MiB', '1.5 GiB': binary units, 2 significant digits below 10."""
    for unit, f in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if nbytes >= f:
            v = nbytes / f
            return f"{v:.1f} {unit}" if v < 10 else f"{v:,.0f} {unit}"
    return f"{nbytes:.0f} B"


def waste_title(cells, block_size: int, layout: str) -> tuple[int, int, str]:
    """(tokens held, slots reserved, the title sentence) over the owned blocks."""
    owned = [c for c in cells if c["owner"] is not None]
    slots = len(owned) * block_size
    tokens = sum(min(c["fill"], block_size) for c in owned)
    if not slots:
        return 0, 0, f"{layout}: no slots reserved"
    return tokens, slots, (f"{layout}: {tokens:,} of {slots:,} reserved slots hold tokens "
                           f"({1 - tokens / slots:.0%} wasted)")


def memory_note(tokens: int, slots: int, bytes_per_token: int | None,
                dtype: str | None) -> str:
    """The waste in memory at the engine's own ``bytes_per_token`` (K and V, all layers):
    "45 KiB a token slot in float32: 1.2 MiB of 11 MiB reserved is empty"."""
    if not bytes_per_token:
        return ""
    per = f"{size(bytes_per_token)} a token slot" + (f" in {dtype}" if dtype else "")
    if not slots:
        return per
    return (f"{per}: {size((slots - tokens) * bytes_per_token)} of "
            f"{size(slots * bytes_per_token)} reserved is empty")

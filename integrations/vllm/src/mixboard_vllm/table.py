"""The plan as the log shows it: one row per layer, like `mixboard explain`'s table."""

from __future__ import annotations


def _why(layer) -> str:
    sel = layer.selection
    if sel.rule:
        return f"forced by {sel.rule}"
    if getattr(sel, "preferred_by", None):
        return f"preferred by {sel.preferred_by}"
    return "highest priority available"


def render(plan) -> str:
    rows = [["layer", "kind", "backend", "why"]]
    rows += [[lp.name, lp.kind, lp.backend, _why(lp)] for lp in plan.layers]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)

"""The plan as the log shows it: one row per layer, like `mixboard explain`'s table."""

from __future__ import annotations


def _why(sel) -> str:
    if sel.rule:
        return f"forced by {sel.rule}"
    if getattr(sel, "preferred_by", None):
        return f"preferred by {sel.preferred_by}"
    return "highest priority available"


def render(plan) -> str:
    rows = [["layer", "kind", "backend", "why"]]
    for lp in plan.layers:
        if getattr(lp, "decode_selection", None) is None:
            rows.append([lp.name, lp.kind, lp.backend, _why(lp.selection)])
        else:  # split by phase: a row per phase, named as rules name it
            rows.append([lp.name, f"{lp.kind}@prefill", lp.backend, _why(lp.selection)])
            rows.append([lp.name, f"{lp.kind}@decode", lp.decode_backend, _why(lp.decode_selection)])
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)

"""A rule as one line of text: ``matmul(matmul(x, w1), w2) ⇒ matmul(x, matmul(w1, w2))``.

Apart from :mod:`taso.rules` so the file format and its reading stay one module; the text is for people (``taso
info``, the verifier's report), never read back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["format_rule"]

_DEFAULTS_HIDDEN = {"activation": "none", "groups": 1, "dilations": (1, 1), "ceil_mode": 0, "count_include_pad": 0, "dtype": "float32"}


def _render_side(nodes: Iterable[Any], value: str) -> str:
    producers = {}
    for n in nodes:
        for i, o in enumerate(n.outputs):
            producers[o] = (n, i)

    def render(v: str) -> str:
        if v not in producers:
            return v
        n, i = producers[v]
        shown = [f"{k}={_short(val)}" for k, val in sorted(n.params.items()) if _DEFAULTS_HIDDEN.get(k, object()) != val]
        call = f"{n.op}({', '.join([render(x) for x in n.inputs] + shown)})"
        return f"{call}[{i}]" if len(n.outputs) > 1 else call

    return render(value)


def _short(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_short(v) for v in value) + ")"
    if isinstance(value, Mapping) and "dim" in value:
        return f"{value['dim'][0]}.{value['dim'][1]}"
    if isinstance(value, Mapping) and "div" in value:
        return f"{_short(value['div'][0])}/{value['div'][1]}"
    return str(value)


def format_rule(rule: Any) -> str:
    """``matmul(matmul(x, w1), w2) ⇒ matmul(x, matmul(w1, w2))``; several outputs are bracketed."""
    src = [_render_side(rule.source, s) for s, _ in rule.outputs]
    tgt = [_render_side(rule.target, t) for _, t in rule.outputs]
    if len(src) == 1:
        return f"{src[0]} ⇒ {tgt[0]}"
    return f"[{', '.join(src)}] ⇒ [{', '.join(tgt)}]"

"""``--set env.kwargs=...``: keyword arguments for an env constructor, shared by the env plugins."""
from __future__ import annotations

import ast


def parse_kwargs(text: str) -> dict:
    """``"N=3,max_cycles=25"`` -> ``{"N": 3, "max_cycles": 25}``.

    Values are Python literals (``3``, ``0.5``, ``True``, ``None``, ``'text'``, ``(1, 2)``);
    a bare word is a string (``render_mode=rgb_array``). Pairs are separated by commas
    outside brackets and quotes, so ``size=(4, 4),name='a,b'`` gives ``{"size": (4, 4), "name": "a,b"}``.

    Raises:
        ValueError: a pair is not ``key=value`` with ``key`` an identifier.
    """
    out = {}
    for pair in filter(None, (p.strip() for p in _split(text))):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ValueError(f"env.kwargs: {pair!r} is not key=value (e.g. --set env.kwargs=N=3,max_cycles=25)")
        try:
            out[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            out[key.strip()] = value.strip()  # a bare word: a string
    return out


def _split(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth, quote = 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return parts

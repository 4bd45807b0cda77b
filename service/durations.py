"""Durations as people write them: seconds (`90`) or units (`1h30m`, `10m`, `2d`), for
job time limits, queue limits and drain deadlines alike."""

from __future__ import annotations

import re

UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
MAX_DURATION_S = 366 * 86400  # a year: longer is a typo, not a limit
_PART = re.compile(r"(\d+)([dhms])")


def parse_duration_s(value: object) -> object:
    """Seconds from an int or a `1h30m`-style string; anything else is left for the
    caller's validation to refuse."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text.isdecimal():
            return int(text)
        parts = _PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(
                f"{value!r} is not a duration: seconds, or numbers with d, h, m, s (1h30m)"
            )
        return sum(int(n) * UNIT_S[u] for n, u in parts)
    return value

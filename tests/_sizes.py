"""How large the tests run: the default fits the README's test command in 5 minutes on 2 cores.

``AGENTCONTEXT_TESTS=long python -m pytest -q`` is the long profile: every
property test draws many more examples and the crash tests kill their writers
the full number of times. The promises checked are the same in both; only the
number of tries differs.

>>> @settings(max_examples=examples(200), deadline=None)   # doctest: +SKIP
"""

from __future__ import annotations

import os

PROFILE = os.environ.get("AGENTCONTEXT_TESTS", "default")
if PROFILE not in ("default", "long"):
    raise RuntimeError(f"AGENTCONTEXT_TESTS must be 'default' or 'long', got {PROFILE!r}")
LONG = PROFILE == "long"


SCALE = 0.5
"""The share of each property test's ``default`` the default profile draws: what keeps the README's
test command within 5 minutes on a slow 2-core machine (measured there: 5:06 with every default in full)."""


def examples(default: int, long: int | None = None) -> int:
    """``max_examples`` for a property test: half of ``default`` (`SCALE`), or ``long`` (10x ``default``) in the long profile."""
    return (long if long is not None else default * 10) if LONG else max(1, round(default * SCALE))


def runs(default: int, long: int) -> int:
    """How many times a costly scenario repeats (kills, restarts): ``default``, or ``long`` in the long profile."""
    return long if LONG else default

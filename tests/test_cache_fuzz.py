"""A small sample of the cache fuzzer (irc/testing/cache_fuzz.py) in CI.

One case (three irc processes): seed 71 puts a FIFO where the compile entry
was, which a plain open would block on forever.  tests/test_compile_cache.py
covers the other kinds of damage one by one; the full campaign is
``python -m irc.testing.cache_fuzz --n 200``.
"""

from __future__ import annotations

from irc.testing import cache_fuzz


def test_damaged_cache_is_rebuilt(tmp_path):
    case, findings = cache_fuzz.run_case(71, tmp_path)
    assert case == "entry:fifo"
    assert findings == []

"""Time and memory limits for fuzzing: one runaway program must not stop a campaign.

Two layers, because a configuration may hang in Python (a pass that never converges, the
interpreter) or in native code (LLVM, or JIT-compiled code looping forever):

* ``time_limit(seconds)`` raises ``ConfigTimeout`` from a ``SIGALRM`` handler.  Python runs
  signal handlers between bytecodes only, so this stops Python code but not a call into
  native code that never returns;
* the campaign's parent process (``irc.testing.fuzz``) watches each worker's heartbeats and
  kills a worker whose configuration overruns its budget by a grace period, then starts a
  fresh worker on the rest of the program.

``limit_memory(mb)`` caps a worker's address space (``RLIMIT_AS``): an allocation past it
raises ``MemoryError`` in Python (numpy included), which the harness reports as a finding of
its own kind instead of letting the worker swap the machine to a halt.
"""

from __future__ import annotations

import resource
import signal
import threading
from contextlib import contextmanager


class ConfigTimeout(BaseException):
    """A configuration ran past its time limit.

    A ``BaseException``, like ``KeyboardInterrupt``, so that the ``except Exception`` a pass
    or the harness uses to report crashes does not swallow it.
    """


@contextmanager
def time_limit(seconds: float | None):
    """Raise ``ConfigTimeout`` in this (main) thread after ``seconds``; no limit if None or 0.

    Not reentrant: an inner limit replaces an outer one.
    """
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum, frame):
        raise ConfigTimeout(f"no result after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def limit_memory(megabytes: int | None) -> None:
    """Cap this process's address space at ``megabytes`` MiB (``RLIMIT_AS``); None or 0: no cap."""
    if not megabytes:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = megabytes * 1024 * 1024
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def resident_megabytes() -> float:
    """This process's resident set size in MiB (Linux; 0.0 where /proc is not available)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * resource.getpagesize() / 2**20

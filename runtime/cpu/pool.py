"""irc's thread pool in machine code: a parallel loop handed to worker threads without Python.

``split-parallel{threads=N}`` marks each call of a parallel segment worth splitting with
``chunks = k`` (runtime/cpu/translate.py turns it into a call of ``irc.parallel_for``).  That
function, defined here in LLVM IR and linked once per process, publishes the loop as one *job*
(the segment's task function, its packed arguments, the range and the number of chunks) and
runs chunks itself until none is left, while the workers take the others; it returns when
every chunk has finished, with the status of the first chunk (in range order) that faulted,
as running the loop in order would report.  A hand-off is a few atomic operations and a
spinning worker seeing them: about a microsecond, where the Python-level hand-off it
replaces (a queue, a wake-up and the GIL) cost tens, which is why small models could not use
a second core (docs/torch.md).

The invariants that keep it simple:

* The caller takes chunks like any worker, so a job finishes even when no worker ever runs
  (none started yet, a forked child, workers descheduled): the pool can slow nothing down
  worse than running the loop serially, and it cannot deadlock.
* One job at a time: a caller that finds the pool busy (another Python thread's call, or a
  parallel loop inside a chunk) runs its whole range itself.
* ``ticket`` packs the job's generation (bits 32-63), its chunk count (16-31) and the next
  chunk to take (0-15: split_parallel.MAX_CHUNKS); a chunk is taken by compare-and-swap on it, so a worker that saw an
  old job can never take a chunk of a new one with the old one's fields.  The job's fields are
  written before the ticket (release) and are read only by the holder of a chunk, and a job's
  fields are not rewritten before all its chunks are done.
* A function with parallel calls calls ``irc.pool_wake`` on entry: where workers sleep, an
  empty job wakes them, so that they are up (a wake-up takes tens of microseconds) by the
  function's first parallel loop rather than after it.
* After its last chunk a worker polls for the next job: spinning on ``pause`` for
  ``SPIN_TICKS`` of the time-stamp counter (it reacts within a microsecond), then calling
  ``sched_yield`` between polls until ``POLL_TICKS`` (it gives the core to any other thread
  that wants it: torch's own threads, in a model that irc compiles part of), then it sleeps on
  a condition variable; a caller wakes them only when one sleeps (a Dekker pair of
  sequentially consistent operations on ``ticket`` and ``sleepers``).  A sleeping worker
  costs a loop nothing but the wake-up call: the caller does not wait for it to take a chunk.

Workers are Python threads parked in one ctypes call of ``irc.pool_work`` (which releases the
GIL and never returns); they are daemons, started on first need (``ensure_workers``).

**A shared OpenMP team** (``share_openmp``): in a process whose other library runs its own
spinning threads on the same cores (torch's OpenMP team, when irc is its ``torch.compile``
backend), two pools would take turns on the cores, each spinning while the other has work.
Sharing hands each loop to that runtime's ``GOMP_parallel`` instead (GNU libgomp's entry, which
LLVM's and Intel's OpenMP runtimes export too): the team's threads take the chunks by an atomic
counter in a job on the caller's stack, the team's join is the job's end, and the statuses are
scanned as above.  A nested loop gets a team of one (OpenMP's default), and a forked child goes
back to irc's workers.
"""

from __future__ import annotations

import ctypes
import os
import threading

SPIN_TICKS = 1 << 17
"""How long (time-stamp counter ticks: ~40-60 us at 2-3.5 GHz) a worker spins for the next job
after its last chunk: the serial code between two parallel loops of one call is mostly shorter.
(Polling through ``sched_yield`` only was 3-5% slower on the MLP of thread_profile.py.)"""

POLL_TICKS = 1 << 20
"""Until when (~0.3-0.5 ms) it polls, yielding, before it sleeps: waking a sleeping thread costs
tens of microseconds."""

_PTHREAD = ("pthread_mutex_init", "pthread_mutex_lock", "pthread_mutex_unlock", "pthread_cond_init",
            "pthread_cond_wait", "pthread_cond_broadcast", "sched_yield")


_JOB = [("fn", "ptr"), ("ctx", "ptr"), ("statuses", "ptr"), ("lb", "i64"), ("ub", "i64"), ("step", "i64"),
        ("trips", "i64"), ("n", "i64")]
"""The fields of an ``%OmpJob`` (a loop handed to an OpenMP team), before its chunk counter."""


def _job_fields(access: str) -> str:
    """LLVM IR that stores the values named as ``_JOB``'s fields into ``%job`` or loads them."""
    lines = []
    for k, (name, t) in enumerate(_JOB):
        lines.append(f"  %{name}_at = getelementptr %OmpJob, ptr %job, i32 0, i32 {k}")
        lines.append(f"  store {t} %{name}, ptr %{name}_at" if access == "store"
                     else f"  %{name} = load {t}, ptr %{name}_at")
    return "\n".join(lines)


def _ir(pause: bool) -> str:
    relax = "call void @llvm.x86.sse2.pause()" if pause else "fence seq_cst"
    pause_decl = "declare void @llvm.x86.sse2.pause()" if pause else ""
    return f"""
@ticket = internal global i64 0, align 64
@done = internal global i64 0, align 64
@busy = internal global i32 0, align 64
@sleepers = internal global i32 0, align 64
@job_fn = internal global ptr null, align 64
@job_ctx = internal global ptr null
@job_status = internal global ptr null
@job_lb = internal global i64 0
@job_ub = internal global i64 0
@job_step = internal global i64 0
@job_trips = internal global i64 0
@mutex = internal global ptr null
@omp_parallel = internal global ptr null, align 8
@omp_max_threads = internal global ptr null
%OmpJob = type {{ {", ".join(t for _, t in _JOB)}, i64 }}
@cond = internal global ptr null

declare i32 @"irc.pthread_mutex_lock"(ptr)
declare i32 @"irc.pthread_mutex_unlock"(ptr)
declare i32 @"irc.pthread_cond_wait"(ptr, ptr)
declare i32 @"irc.pthread_cond_broadcast"(ptr)
declare i32 @"irc.sched_yield"()
declare i64 @llvm.readcyclecounter()
{pause_decl}

; Wake the workers asleep on the condition.  The mutex is taken first: a worker going to sleep
; holds it from before it counts itself in ``sleepers`` until ``cond_wait`` releases it.
define internal void @wake_sleepers() {{
entry:
  %m = load ptr, ptr @mutex
  %c = load ptr, ptr @cond
  %l1 = call i32 @"irc.pthread_mutex_lock"(ptr %m)
  %l2 = call i32 @"irc.pthread_mutex_unlock"(ptr %m)
  %l3 = call i32 @"irc.pthread_cond_broadcast"(ptr %c)
  ret void
}}

; Run chunk ``idx`` of ``n`` over [lb, ub) by ``step`` (``trips`` iterations): chunk i has q
; trips, one more for the first r, so it starts at q*i + min(i, r); the last ends at ``ub``.
define internal void @run_chunk(ptr %fn, ptr %ctx, ptr %statuses, i64 %lb, i64 %ub, i64 %step, i64 %trips, i64 %n, i64 %idx) alwaysinline {{
entry:
  %q = udiv i64 %trips, %n
  %r = urem i64 %trips, %n
  %qi = mul i64 %q, %idx
  %small = icmp ult i64 %idx, %r
  %mi = select i1 %small, i64 %idx, i64 %r
  %start = add i64 %qi, %mi
  %extra = zext i1 %small to i64
  %size = add i64 %q, %extra
  %off = mul i64 %start, %step
  %lo = add i64 %lb, %off
  %last1 = add i64 %idx, 1
  %last = icmp eq i64 %last1, %n
  %len = mul i64 %size, %step
  %hi0 = add i64 %lo, %len
  %hi = select i1 %last, i64 %ub, i64 %hi0
  %status = call i32 %fn(ptr %ctx, i64 %lo, i64 %hi)
  %slot = getelementptr i32, ptr %statuses, i64 %idx
  store i32 %status, ptr %slot
  ret void
}}

; Take chunks of the job ``ticket`` names until none is left; run each.
define internal void @take_chunks() {{
entry:
  br label %again
again:
  %t = load atomic i64, ptr @ticket acquire, align 8
  %idx = and i64 %t, 65535
  %n16 = lshr i64 %t, 16
  %n = and i64 %n16, 65535
  %left = icmp ult i64 %idx, %n
  br i1 %left, label %take, label %out
take:
  %t1 = add i64 %t, 1
  %pair = cmpxchg ptr @ticket, i64 %t, i64 %t1 acq_rel acquire
  %won = extractvalue {{ i64, i1 }} %pair, 1
  br i1 %won, label %run, label %again
run:
  %fn = load ptr, ptr @job_fn
  %ctx = load ptr, ptr @job_ctx
  %statuses = load ptr, ptr @job_status
  %lb = load i64, ptr @job_lb
  %ub = load i64, ptr @job_ub
  %step = load i64, ptr @job_step
  %trips = load i64, ptr @job_trips
  call void @run_chunk(ptr %fn, ptr %ctx, ptr %statuses, i64 %lb, i64 %ub, i64 %step, i64 %trips, i64 %n, i64 %idx)
  %ignored = atomicrmw add ptr @done, i64 1 release
  br label %again
out:
  ret void
}}

; What each thread of an OpenMP team runs (``share_openmp``): chunks of the job on the caller's
; stack, ``%OmpJob``, taken by an atomic counter.  The team's join is the job's end.
define internal void @omp_task(ptr %job) {{
entry:
{_job_fields("load")}
  %next_at = getelementptr %OmpJob, ptr %job, i32 0, i32 {len(_JOB)}
  br label %again
again:
  %idx = atomicrmw add ptr %next_at, i64 1 monotonic
  %left = icmp ult i64 %idx, %n
  br i1 %left, label %run, label %out
run:
  call void @run_chunk(ptr %fn, ptr %ctx, ptr %statuses, i64 %lb, i64 %ub, i64 %step, i64 %trips, i64 %n, i64 %idx)
  br label %again
out:
  ret void
}}

; ``fn(ctx, lo, hi)`` over [lb, ub) by ``step`` in ``chunks`` chunks; the first non-zero status.
define i32 @"irc.parallel_for"(ptr %fn, ptr %ctx, ptr %statuses, i64 %lb, i64 %ub, i64 %step, i64 %chunks) {{
entry:
  %job = alloca %OmpJob, align 8
  %some = icmp sgt i64 %ub, %lb
  br i1 %some, label %count, label %serial
count:
  %span = sub i64 %ub, %lb
  %span1 = sub i64 %span, 1
  %trips0 = udiv i64 %span1, %step
  %trips = add i64 %trips0, 1
  %fewer = icmp ult i64 %trips, %chunks
  %n = select i1 %fewer, i64 %trips, i64 %chunks
  %several = icmp ugt i64 %n, 1
  br i1 %several, label %choose, label %serial
choose:
  %omp = load atomic ptr, ptr @omp_parallel acquire, align 8
  %own = icmp eq ptr %omp, null
  br i1 %own, label %lock, label %team
team:
  %team_size_fn = load atomic ptr, ptr @omp_max_threads monotonic, align 8
  %most = call i32 %team_size_fn()
  %most64 = sext i32 %most to i64
  %wider = icmp ult i64 %most64, %n
  %size64 = select i1 %wider, i64 %most64, i64 %n
  %size = trunc i64 %size64 to i32
{_job_fields("store")}
  %next_at = getelementptr %OmpJob, ptr %job, i32 0, i32 {len(_JOB)}
  store i64 0, ptr %next_at
  call void %omp(ptr @omp_task, ptr %job, i32 %size, i32 0)
  br label %scan
lock:
  %pair = cmpxchg ptr @busy, i32 0, i32 1 acquire monotonic
  %got = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %got, label %publish, label %serial
serial:
  %whole = call i32 %fn(ptr %ctx, i64 %lb, i64 %ub)
  ret i32 %whole
publish:
  store ptr %fn, ptr @job_fn
  store ptr %ctx, ptr @job_ctx
  store ptr %statuses, ptr @job_status
  store i64 %lb, ptr @job_lb
  store i64 %ub, ptr @job_ub
  store i64 %step, ptr @job_step
  store i64 %trips, ptr @job_trips
  store atomic i64 0, ptr @done monotonic, align 8
  %old = load atomic i64, ptr @ticket monotonic, align 8
  %gen = lshr i64 %old, 32
  %gen1 = add i64 %gen, 1
  %genbits = shl i64 %gen1, 32
  %nbits = shl i64 %n, 16
  %new = or i64 %genbits, %nbits
  store atomic i64 %new, ptr @ticket seq_cst, align 8
  %asleep = load atomic i32, ptr @sleepers seq_cst, align 4
  %wake = icmp ne i32 %asleep, 0
  br i1 %wake, label %signal, label %work
signal:
  call void @wake_sleepers()
  br label %work
work:
  call void @take_chunks()
  br label %wait
wait:
  %d = load atomic i64, ptr @done acquire, align 8
  %all = icmp eq i64 %d, %n
  br i1 %all, label %finished, label %relax
relax:
  {relax}
  br label %wait
finished:
  store atomic i32 0, ptr @busy release, align 4
  br label %scan
scan:
  %i = phi i64 [ 0, %finished ], [ 0, %team ], [ %i1, %next ]
  %at = getelementptr i32, ptr %statuses, i64 %i
  %s = load i32, ptr %at
  %bad = icmp ne i32 %s, 0
  br i1 %bad, label %fault, label %next
next:
  %i1 = add i64 %i, 1
  %end = icmp eq i64 %i1, %n
  br i1 %end, label %ok, label %scan
fault:
  ret i32 %s
ok:
  ret i32 0
}}

; A worker: take the chunks of each new job; poll a while for the next (spinning, then yielding),
; then sleep.
define void @"irc.pool_work"(i64 %spin, i64 %polling) {{
entry:
  %t0 = load atomic i64, ptr @ticket acquire, align 8
  %seen0 = lshr i64 %t0, 32
  %now0 = call i64 @llvm.readcyclecounter()
  br label %poll
poll:
  %seen = phi i64 [ %seen0, %entry ], [ %gen, %run ], [ %seen, %woke ], [ %seen, %relax ], [ %seen, %yield ]
  %since = phi i64 [ %now0, %entry ], [ %now1, %run ], [ %now2, %woke ], [ %since, %relax ], [ %since, %yield ]
  %t = load atomic i64, ptr @ticket acquire, align 8
  %gen = lshr i64 %t, 32
  %new = icmp ne i64 %gen, %seen
  br i1 %new, label %run, label %idle
run:
  call void @take_chunks()
  %now1 = call i64 @llvm.readcyclecounter()
  br label %poll
idle:
  %now = call i64 @llvm.readcyclecounter()
  %waited = sub i64 %now, %since
  %more = icmp ult i64 %waited, %polling
  br i1 %more, label %give, label %sleep
give:
  %spinning = icmp ult i64 %waited, %spin
  br i1 %spinning, label %relax, label %yield
relax:
  {relax}
  br label %poll
yield:
  %y = call i32 @"irc.sched_yield"()
  br label %poll
sleep:
  %m = load ptr, ptr @mutex
  %c = load ptr, ptr @cond
  %l1 = call i32 @"irc.pthread_mutex_lock"(ptr %m)
  %s1 = atomicrmw add ptr @sleepers, i32 1 seq_cst
  br label %check
check:
  %t2 = load atomic i64, ptr @ticket seq_cst, align 8
  %gen2 = lshr i64 %t2, 32
  %same = icmp eq i64 %gen2, %seen
  br i1 %same, label %block, label %woke
block:
  %w = call i32 @"irc.pthread_cond_wait"(ptr %c, ptr %m)
  br label %check
woke:
  %s2 = atomicrmw sub ptr @sleepers, i32 1 seq_cst
  %l2 = call i32 @"irc.pthread_mutex_unlock"(ptr %m)
  %now2 = call i64 @llvm.readcyclecounter()
  br label %poll
}}

; Wake sleeping workers ahead of a function's parallel loops: an empty job (no chunk) bumps the
; generation they wait on.  Nothing when none sleeps, or when the pool is busy (they are up).
define void @"irc.pool_wake"() {{
entry:
  %omp = load atomic ptr, ptr @omp_parallel monotonic, align 8
  %own = icmp eq ptr %omp, null
  br i1 %own, label %count, label %out
count:
  %asleep = load atomic i32, ptr @sleepers monotonic, align 4
  %any = icmp ne i32 %asleep, 0
  br i1 %any, label %lock, label %out
lock:
  %pair = cmpxchg ptr @busy, i32 0, i32 1 acquire monotonic
  %got = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %got, label %publish, label %out
publish:
  %old = load atomic i64, ptr @ticket monotonic, align 8
  %gen = lshr i64 %old, 32
  %gen1 = add i64 %gen, 1
  %new = shl i64 %gen1, 32
  store atomic i64 %new, ptr @ticket seq_cst, align 8
  store atomic i32 0, ptr @busy release, align 4
  call void @wake_sleepers()
  br label %out
out:
  ret void
}}

; Run parallel loops on the team of the OpenMP runtime whose ``GOMP_parallel`` and
; ``omp_get_max_threads`` these are (null: on irc's own workers again).  Stopping keeps the last
; ``omp_get_max_threads``: a loop on another thread that has just read the team's entry still
; reads a function to call (its library stays loaded: _Pool.share_openmp keeps its handle).
define void @"irc.pool_share_openmp"(ptr %parallel, ptr %max_threads) {{
entry:
  %off = icmp eq ptr %parallel, null
  br i1 %off, label %publish, label %size
size:
  store atomic ptr %max_threads, ptr @omp_max_threads monotonic, align 8
  br label %publish
publish:
  store atomic ptr %parallel, ptr @omp_parallel release, align 8
  ret void
}}

; Set up (or, in a forked child, reset) the pool: no job, no sleeper, these mutex and condition.
define void @"irc.pool_reset"(ptr %mutex, ptr %cond) {{
entry:
  store ptr %mutex, ptr @mutex
  store ptr %cond, ptr @cond
  store atomic ptr null, ptr @omp_parallel seq_cst, align 8
  store atomic i32 0, ptr @sleepers seq_cst, align 4
  store atomic i64 0, ptr @done seq_cst, align 8
  %old = load atomic i64, ptr @ticket seq_cst, align 8
  %gen = and i64 %old, -4294967296
  store atomic i64 %gen, ptr @ticket seq_cst, align 8
  store atomic i32 0, ptr @busy seq_cst, align 4
  ret void
}}
"""


class _Pool:
    """The linked pool: its entry points' addresses, and the workers started so far."""

    def __init__(self):
        import llvmlite.binding as llvm

        from . import engine, symbols

        engine._init()
        pause = llvm.get_process_triple().startswith(("x86_64", "i686", "i386"))
        module = llvm.parse_assembly(_ir(pause))
        module.verify()
        tm = engine.target_machine(2, *engine.host_cpu(), reloc="pic")  # one pool, whatever the target
        object_code = tm.emit_object(module)
        imports = {}
        for name in _PTHREAD:
            address = symbols.process_address(name)
            if address is None:
                raise RuntimeError(f"irc's thread pool needs {name}, which this process does not have")
            imports[f"irc.{name}"] = address
        names = ["irc.parallel_for", "irc.pool_wake", "irc.pool_work", "irc.pool_reset", "irc.pool_share_openmp"]
        self.library, addresses = engine.load(names, object_code=object_code, imports=imports)
        self.parallel_for = addresses["irc.parallel_for"]
        self.wake = addresses["irc.pool_wake"]
        self._work = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(addresses["irc.pool_work"])
        self._reset = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(addresses["irc.pool_reset"])
        self._share = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(addresses["irc.pool_share_openmp"])
        self._init_mutex = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(
            imports["irc.pthread_mutex_init"])
        self._init_cond = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(
            imports["irc.pthread_cond_init"])
        self.workers = 0
        self.wanted = 0  # the most workers asked for (a forked child starts as many)
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """A fresh mutex and condition, no job and no worker (at start, and in a forked child,
        which has none of its parent's threads)."""
        # Larger than glibc's pthread_mutex_t (40 bytes) and pthread_cond_t (48) or any other's.
        self._mutex = ctypes.create_string_buffer(256)
        self._cond = ctypes.create_string_buffer(256)
        if self._init_mutex(self._mutex, None) or self._init_cond(self._cond, None):
            raise RuntimeError("irc's thread pool could not initialise its mutex")
        self._reset(self._mutex, self._cond)
        self.workers = 0
        self.openmp: str | None = None  # the library whose OpenMP team runs the loops (share_openmp)

    def share_openmp(self, library: str) -> bool:
        """Run parallel loops on the OpenMP team of ``library``, a shared library this process
        has loaded that exports (or links one that exports) ``GOMP_parallel`` and
        ``omp_get_max_threads``; False, and no change, where it is not loaded or has neither."""
        try:
            handle = ctypes.CDLL(library, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
            parallel, max_threads = handle.GOMP_parallel, handle.omp_get_max_threads
        except (OSError, AttributeError):
            return False
        self._share(ctypes.cast(parallel, ctypes.c_void_p), ctypes.cast(max_threads, ctypes.c_void_p))
        self._openmp_handle = handle  # keeps the library loaded while its functions are linked
        self.openmp = library
        return True

    def stop_sharing(self) -> None:
        """Run parallel loops on irc's own workers again (started as ``ensure_workers`` asked)."""
        self._share(None, None)
        self.openmp = None
        self.ensure_workers(self.wanted)

    def restart(self) -> None:
        """In a forked child: the pool reset, and as many workers started as the parent had (a
        call of code compiled before the fork does not pass through Python to start them).  A
        shared OpenMP team is given up: GNU libgomp's team does not survive a fork."""
        count = self.wanted
        self._lock = threading.Lock()
        self.reset()
        self.ensure_workers(count)

    def ensure_workers(self, count: int) -> None:
        """Start workers until there are ``count`` (none while an OpenMP team is shared)."""
        self.wanted = max(self.wanted, count)
        if self.workers >= count or self.openmp:
            return
        with self._lock:
            while self.workers < count:
                threading.Thread(target=self._work, args=(SPIN_TICKS, POLL_TICKS), name=f"irc-worker-{self.workers}",
                                 daemon=True).start()
                self.workers += 1


_POOL: _Pool | None = None
_FIRST_USE = threading.Lock()


def _fresh_lock() -> None:
    global _FIRST_USE
    _FIRST_USE = threading.Lock()  # a forked child does not have the thread that may hold it


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock)


def pool() -> _Pool:
    """The process's pool, compiled and linked on first use (a few milliseconds).  Built under a
    lock: threads that first ask at once must share one pool, since a module linked against a
    pool that is not the process's one would never get a worker."""
    global _POOL
    if _POOL is None:
        with _FIRST_USE:
            if _POOL is None:
                found = _Pool()
                if hasattr(os, "register_at_fork"):
                    os.register_at_fork(after_in_child=found.restart)
                _POOL = found
    return _POOL


def addresses() -> dict[str, int]:
    """What a module with parallel calls imports: ``irc.parallel_for`` and ``irc.pool_wake``."""
    found = pool()
    return {"irc.parallel_for": found.parallel_for, "irc.pool_wake": found.wake}


def address() -> int:
    """Where ``irc.parallel_for`` is."""
    return pool().parallel_for


def ensure_workers(threads: int) -> None:
    """Make sure ``threads - 1`` workers run (the caller is the other thread)."""
    if threads > 1:
        pool().ensure_workers(threads - 1)

"""Parser and verifier fuzzing: mutated real inputs must raise nothing but ``irc.IRError``.

    python -m irc.testing.parser_fuzz --n 1000000 --seed 0 [--jobs 2] [--time-limit SECONDS]

Inputs are the repository's ``.ir`` files plus generated programs, mutated by
``irc.testing.mutate`` (the mutators of ``tests/test_parser_fuzz.py``).  Each
mutant is parsed, verified and printed; an ``IRError`` must point inside the
input (a line and column that exist, since the CLI shows that line with a
caret).  Any other exception is a crash: it is printed with the mutant's seed
and saved under ``--out``, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import irc

from .generate import random_program
from .mutate import RandomChooser, mutate

ROOT = Path(__file__).resolve().parent.parent.parent


def corpus(root: Path = ROOT) -> list[str]:
    """Every ``.ir`` file under ``root`` (sorted, so seeds reproduce) plus a few generated programs."""
    files = sorted(p for p in root.rglob("*.ir") if ".git" not in p.parts)
    return [p.read_text() for p in files] + [random_program(seed, 12) for seed in range(8)]


def check(text: str) -> None:
    """``text`` parses, verifies and prints, or raises ``irc.IRError`` pointing inside it."""
    try:
        module = irc.parse(text, "fuzz.ir")
        irc.verify(module)
        str(module)  # whatever verifies must print
    except irc.IRError as e:
        loc = e.location
        if loc.line == 0:
            return  # an error about the whole input, with no position
        lines = text.splitlines() or [""]
        if not 1 <= loc.line <= len(lines) + 1:
            raise AssertionError(f"error line {loc.line} outside the input ({len(lines)} lines): {e}") from None
        line = lines[loc.line - 1] if loc.line <= len(lines) else ""
        if not 1 <= loc.column <= len(line) + 1:
            raise AssertionError(f"error column {loc.column} outside line {loc.line} {line!r}: {e}") from None
        str(e)  # rendering the diagnostic (the caret line) must not fail either


def mutant(inputs: list[str], seed: int) -> str:
    rng = random.Random(f"irc-mutant:{seed}")
    return mutate(RandomChooser(rng), rng.choice(inputs))


_INPUTS: list[str] = []


def _chunk(start: int, stop: int, out: str | None) -> tuple[int, list[tuple[int, str]]]:
    if not _INPUTS:
        _INPUTS.extend(corpus())
    crashes = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for seed in range(start, stop):
        text = mutant(_INPUTS, seed)
        try:
            check(text)
        except RecursionError:
            crashes.append((seed, "RecursionError"))
        except Exception as e:  # noqa: BLE001 - anything but IRError is what we look for
            crashes.append((seed, "".join(traceback.format_exception(type(e), e, e.__traceback__)[-3:])))
            if out is not None:
                Path(out).mkdir(parents=True, exist_ok=True)
                (Path(out) / f"mutant-{seed}.ir").write_text(text)
    return stop - start, crashes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m irc.testing.parser_fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=2_000)
    parser.add_argument("--time-limit", type=float, default=None)
    parser.add_argument("--out", default=None, help="where crashing mutants are saved")
    ns = parser.parse_args(argv)
    start = time.monotonic()
    done, crashes = 0, []
    chunks = [(s, min(s + ns.chunk, ns.seed + ns.n), ns.out) for s in range(ns.seed, ns.seed + ns.n, ns.chunk)]
    print(f"parser fuzz: seed {ns.seed}, {ns.n} mutants, {len(corpus())} inputs", flush=True)
    with ProcessPoolExecutor(max(1, ns.jobs)) as pool:
        futures = [pool.submit(_chunk, *c) for c in chunks]
        for fut in futures:
            if ns.time_limit is not None and time.monotonic() - start > ns.time_limit:
                for f in futures:
                    f.cancel()
            if fut.cancelled():
                continue
            n, found = fut.result()
            done += n
            crashes += found
            for seed, what in found:
                print(f"  mutant {seed}: {what.strip().splitlines()[-1]}", flush=True)
            print(f"  ... {done} mutants, {len(crashes)} crashes, {time.monotonic() - start:.0f}s", flush=True)
    print(f"mutants: {done}, crashes: {len(crashes)}, time: {time.monotonic() - start:.1f}s", flush=True)
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())

"""Public entry points check their arguments (issue 11, item 11).

Every public function is called with None, ints, bytes and wrong objects; each
call must raise TypeError or ValueError naming the parameter, never crash
(``irc.parse(None)`` used to segfault in the lexer) and never fail deeper
inside (``irc.compile(None)`` was an AttributeError).  The calls run in a
child process so that a crash fails the test instead of killing pytest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(r'''
    import sys
    import numpy as np
    import irc
    import irc.passes
    from irc.interpreter import Interpreter

    m = irc.parse("func.func @f(%a: i64) -> i64 {\n  func.return %a : i64\n}\n")
    exe = irc.compile(m, cache=False)
    WRONG = [None, 0, 1.5, b"func.func", object(), [m], {"x": 1}]

    CASES = []  # (description, callable, parameter name)
    for bad in WRONG:
        r = repr(bad)[:20]
        CASES += [
            (f"parse({r})", lambda b=bad: irc.parse(b), "text"),
            (f"parse(filename={r})", lambda b=bad: irc.parse("", b), "filename"),
            (f"parse(allow_unregistered={r})", lambda b=bad: irc.parse("", "x", b), "allow_unregistered"),
            (f"parse_file({r})", lambda b=bad: irc.parse_file(b), "path"),
            (f"verify({r})", lambda b=bad: irc.verify(b), "module"),
            (f"interpret({r})", lambda b=bad: irc.interpret(b, "f", 1), "module"),
            (f"interpret(name={r})", lambda b=bad: irc.interpret(m, b, 1), "name"),
            (f"Interpreter({r})", lambda b=bad: Interpreter(b), "module"),
            (f"compile({r})", lambda b=bad: irc.compile(b), "module"),
            (f"compile(target={r})", lambda b=bad: irc.compile(m, b), "target"),
            (f"compile(opt_level={r})", lambda b=bad: irc.compile(m, opt_level=b), "opt_level"),
            (f"compile(cache_dir={r})", lambda b=bad: irc.compile(m, cache_dir=b), "cache_dir"),
            (f"compile(checks={r})", lambda b=bad: irc.compile(m, checks=b), "checks"),
            (f"passes.run({r})", lambda b=bad: irc.passes.run(b, "dce"), "module"),
            (f"passes.run(pipeline={r})", lambda b=bad: irc.passes.run(m, b), "pipeline"),
            (f"Module.lookup({r})", lambda b=bad: m.lookup(b), "name"),
            (f"Module.function({r})", lambda b=bad: m.function(b), "name"),
            (f"Module.print(generic={r})", lambda b=bad: m.print(generic=b), "generic"),
            (f"exe[{r}]", lambda b=bad: exe[b], "name"),
            (f"exe.f({r})", lambda b=bad: exe.f(b), "a"),
            (f"interpret f({r})", lambda b=bad: irc.interpret(m, "f", b), "argument 0"),
            (f"load({r})", lambda b=bad: irc.load(b), "path"),
            (f"load(max_header_size={r})", lambda b=bad: irc.load("x.irc", max_header_size=b), "max_header_size"),
            (f"save({r})", lambda b=bad: irc.save(b, lambda p: p, None), "path"),
            (f"save(fn={r})", lambda b=bad: irc.save("x.irc", b, None), "fn"),
        ]
    failures = []
    for what, call, param in CASES:
        if param in ("opt_level", "a", "argument 0", "max_header_size") and what.endswith(("(0)", "=0)")) \
                or param == "cache_dir" and what.endswith("=None)"):
            continue  # valid values of these parameters
        try:
            call()
        except (TypeError, ValueError) as e:
            if param not in str(e):
                failures.append(f"{what}: {type(e).__name__} does not name '{param}': {e}")
        except BaseException as e:  # an IRError, an AttributeError from inside, ...
            failures.append(f"{what}: {type(e).__name__}: {e}")
        else:
            failures.append(f"{what}: accepted")
    print("\n".join(failures))
    print(f"checked {len(CASES)} calls")
''')


def test_every_public_entry_point_checks_its_argument_types(tmp_path):
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert p.returncode == 0, f"the child died (rc {p.returncode}): {p.stderr[-2000:]}"
    lines = p.stdout.strip().splitlines()
    assert lines[-1].startswith("checked"), p.stdout + p.stderr
    failures = lines[:-1]
    assert failures == [], "\n".join(failures)


def test_parse_rejects_nul_characters_with_a_location():
    import pytest

    import irc

    with pytest.raises(irc.IRError) as e:
        irc.parse("func.func @f() {\n  func.return\0\n}\n", "t.ir")
    assert str(e.value).startswith("t.ir:2:14: error: a NUL byte")


def test_parse_file_is_bounded_like_the_cli(tmp_path):
    import pytest

    import irc

    # /dev/zero in a child with bounded memory: a reader without a cap must not exhaust the machine.
    code = ("import resource, irc; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
            "try:\n    irc.parse_file('/dev/zero')\nexcept ValueError as e:\n    print(e)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "/dev/zero is a device" in p.stdout, p.stderr[-1000:]
    with pytest.raises(ValueError, match="is a directory"):
        irc.parse_file(tmp_path)
    with pytest.raises(FileNotFoundError):
        irc.parse_file(tmp_path / "missing.ir")
    (tmp_path / "x.ir").write_text("func.func @f() {\n  func.return\n}\n")
    assert irc.parse_file(tmp_path / "x.ir").lookup("f") is not None
    with pytest.raises(ValueError, match="larger than 10 bytes"):
        irc.parse_file(tmp_path / "x.ir", max_size=10)

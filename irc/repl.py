"""``irc repl [FILE]``: the pass explorer (irc/explorer.py) as an interactive shell.

On a terminal it reads commands with prompt_toolkit (history, tab completion of commands,
pass names, pass options and function names) and colours IR with irc.highlight; otherwise
it reads one command per line from standard input, so scripts and tests drive it.  Every
command's failure is one message (or a ``file:line:col`` diagnostic) and the session goes
on with its state unchanged; no input shows a traceback.  Scripted sessions exit with 1 if
any command failed.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from collections.abc import Callable

from .diagnostics import IRError
from .explorer import Explorer, ExplorerError

HELP = """\
commands (a step is one pass; step 0 is the input):
  show [@func]            print the module, or one function
  apply PIPELINE          run passes, one step each, e.g. apply canonicalize,cse
  undo [N]                move back N steps (default 1): instant at any size
  redo [N]                move forward N steps again
  diff [STEP [STEP]]      unified diff: previous -> current, STEP -> current, or STEP -> STEP
  history                 the steps, and the pipeline so far as one -p string
  suggest                 the passes (without options) that would change the IR now
  run FUNC ARGS...        run a function on the interpreter (arrays as @file.npy)
  compare FUNC ARGS...    interpreter vs JIT on the current step
  bisect FUNC ARGS...     the first step after which the interpreter's result changes
  verify                  verify the current step
  view OUT.svg|png|dot [@func] [--cfg|--dataflow]   draw the current step
  save FILE               write the current step's text
  load FILE               start over from another file
  passes                  the registered passes
  help                    this text
  quit                    leave (or end of input, Ctrl-D)"""

COMMANDS = ("show", "apply", "undo", "redo", "diff", "history", "suggest", "run", "compare", "bisect",
            "verify", "view", "save", "load", "passes", "help", "quit", "exit")


class CommandError(Exception):
    """A command the user typed wrong: one line to print."""


class Repl:
    """The commands; ``execute(line)`` runs one and returns False to stop."""

    def __init__(self, explorer: Explorer, out=None, err=None, colour: bool = False):
        self.x = explorer
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.colour = colour
        self.failed = False

    # -- output ------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        self.out.write(text if text.endswith("\n") else text + "\n")
        self.out.flush()

    def show_ir(self, text: str) -> None:
        if self.colour:
            try:
                from .highlight import highlight_terminal

                text = highlight_terminal(text)
            except ImportError:
                pass
        self.say(text)

    def error(self, text: str) -> None:
        self.failed = True
        self.out.flush()
        self.err.write(text if text.endswith("\n") else text + "\n")
        self.err.flush()

    # -- dispatch ------------------------------------------------------------------------------

    def execute(self, line: str) -> bool:
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("//"):
            return True
        command, _, rest = line.partition(" ")
        rest = rest.strip()
        handler: Callable[[str], bool | None] | None = getattr(self, "do_" + command, None) \
            if command in COMMANDS else None
        if handler is None:
            import difflib

            close = difflib.get_close_matches(command, COMMANDS, n=1)
            self.error(f"error: unknown command '{command}'" + (f"; did you mean '{close[0]}'?" if close else "")
                       + " ('help' lists the commands)")
            return True
        from .passmanager import PipelineError

        try:
            return handler(rest) is not False
        except (CommandError, ExplorerError, PipelineError) as e:
            self.error(f"error: {e}")
        except IRError as e:
            self.error(str(e))
        except (TypeError, ValueError) as e:  # wrong arguments for a function, bad numbers
            self.error(f"error: {e}")
        except KeyboardInterrupt:
            self.error("interrupted")
        except RecursionError:
            self.error("error: the program is nested too deeply for irc to process")
        except MemoryError:
            self.error("error: out of memory")
        except Exception as e:  # noqa: BLE001 - the session must survive a bug in a pass
            self.error(f"internal error: {type(e).__name__}: {e} (a bug in irc; the session goes on "
                       "with the IR as it was)")
        return True

    # -- commands ------------------------------------------------------------------------------

    def do_help(self, rest: str) -> None:
        self.say(HELP)

    def do_quit(self, rest: str) -> bool:
        return False

    do_exit = do_quit

    def do_show(self, rest: str) -> None:
        if not rest:
            self.show_ir(self.x.text)
            return
        self.show_ir(self.x.function_text(_one(rest, "show [@func]")))

    def do_apply(self, rest: str) -> None:
        if not rest:
            raise CommandError("apply needs a pipeline, e.g. apply canonicalize,cse")
        pipeline = rest[1:-1] if len(rest) > 1 and rest[0] == rest[-1] and rest[0] in "'\"" else rest
        start = time.perf_counter()
        steps = self.x.apply(pipeline)
        elapsed = time.perf_counter() - start
        first = self.x.position - len(steps) + 1
        for i, step in enumerate(steps):
            what = "changed" if step.changed else "no change"
            self.say(f"step {first + i}: {step.title} ({what})")
        if elapsed > 1:  # worth saying only when it was slow
            self.say(f"({elapsed:.1f} s)")

    def do_undo(self, rest: str) -> None:
        step = self.x.undo(_count(rest, "undo"))
        self.say(f"at step {self.x.position}: {step.title}")

    def do_redo(self, rest: str) -> None:
        step = self.x.redo(_count(rest, "redo"))
        self.say(f"at step {self.x.position}: {step.title}")

    def do_diff(self, rest: str) -> None:
        words = rest.split()
        if len(words) > 2:
            raise CommandError("usage: diff [STEP [STEP]]")
        try:
            steps = [int(w) for w in words]
        except ValueError:
            raise CommandError(f"diff takes step numbers ('history' lists them), got '{rest}'") from None
        text = self.x.diff(*steps)
        if not text:
            self.say("(no difference)")
            return
        if self.colour:
            text = "".join(_colour_diff_line(line) for line in text.splitlines(keepends=True))
        self.say(text)

    def do_history(self, rest: str) -> None:
        for i, step in enumerate(self.x.steps):
            mark = "*" if i == self.x.position else " "
            notes = []
            if not step.changed:
                notes.append("no change")
            if i > self.x.position:
                notes.append("undone")
            self.say(f"{mark} {i:3d}  {step.title}" + (f"  ({', '.join(notes)})" if notes else ""))
        history = self.x.history
        self.say(f"-p '{history}'" if history else "(no passes applied)")

    def do_suggest(self, rest: str) -> None:
        start = time.perf_counter()
        found = self.x.suggest()
        elapsed = time.perf_counter() - start
        for s in found:
            self.say(str(s))
        self.say(("(no pass changes the IR) " if not found else "") + f"({elapsed:.2f} s)")

    def _call(self, rest: str, usage: str):
        from .cli import UsageError, parse_argument

        try:
            words = shlex.split(rest)
        except ValueError as e:
            raise CommandError(f"{usage}: {e}") from None
        if not words:
            raise CommandError(f"usage: {usage}")
        name = words[0].lstrip("@")
        func = self.x.module.function(name)
        ft = func.function_type
        if len(words) - 1 != len(ft.inputs):
            raise CommandError(f"@{name} takes {len(ft.inputs)} argument(s) "
                               f"({', '.join(map(str, ft.inputs))}), got {len(words) - 1}")
        try:
            args = [parse_argument(text, t, i) for i, (text, t) in enumerate(zip(words[1:], ft.inputs))]
        except UsageError as e:
            raise CommandError(str(e)) from None
        return name, ft, args

    def _format(self, value, ft) -> str:
        from .cli import format_result
        from .explorer import Fault

        if isinstance(value, Fault):
            return str(value)
        values = () if value is None else (value if len(ft.results) > 1 else (value,))
        return "\n".join(format_result(v, t) for v, t in zip(values, ft.results)) or "(no results)"

    def do_run(self, rest: str) -> None:
        name, ft, args = self._call(rest, "run FUNC ARGS...")
        self.say(self._format(self.x.run(name, *args), ft))

    def do_compare(self, rest: str) -> None:
        from .explorer import same_result

        name, ft, args = self._call(rest, "compare FUNC ARGS...")
        expected, got = self.x.compare(name, *args)
        self.say(f"interpreter: {self._format(expected, ft)}")
        self.say(f"jit:         {self._format(got, ft)}")
        if same_result(expected, got):
            self.say("same")
        else:
            self.error("error: the interpreter and the JIT disagree")

    def do_bisect(self, rest: str) -> None:
        name, ft, args = self._call(rest, "bisect FUNC ARGS...")
        if self.x.position == 0:
            raise CommandError("nothing to bisect: apply passes first")
        found = self.x.bisect(name, *args)
        if found.step is None:
            self.say(f"every step up to {self.x.position} computes what the input computes: "
                     f"{self._format(found.expected, ft)}")
            return
        self.say(f"step {found.step} ({found.title}) changes the result:\n"
                 f"  before: {self._format(found.expected, ft)}\n  after:  {self._format(found.got, ft)}")

    def do_verify(self, rest: str) -> None:
        from .verifier import verify

        verify(self.x.module)
        self.say("ok")

    def do_save(self, rest: str) -> None:
        from .fileio import InputError, write_output

        path = _one(rest, "save FILE")
        text = self.x.text
        try:
            write_output(text if text.endswith("\n") else text + "\n", path)
        except InputError as e:
            raise CommandError(str(e)) from None
        self.say(f"saved step {self.x.position} to {path}")

    def do_load(self, rest: str) -> None:
        module = load_module(_one(rest, "load FILE"))
        self.x.reset(module)
        self.say(f"loaded {self.x.name}")

    def do_view(self, rest: str) -> None:
        from .fileio import InputError, write_output
        from .picture import PictureError, format_of, function_graph, module_graph, render_bytes

        words = rest.split()
        kind = "auto"
        for flag in ("--cfg", "--dataflow"):
            if flag in words:
                kind = flag[2:]
                words.remove(flag)
        funcs = [w for w in words if w.startswith("@")]
        paths = [w for w in words if not w.startswith("@")]
        if len(paths) != 1 or len(funcs) > 1:
            raise CommandError("usage: view OUT.svg|png|dot [@func] [--cfg|--dataflow]")
        try:
            fmt = format_of(paths[0])
            graph = function_graph(self.x.module.function(funcs[0][1:]), kind) if funcs \
                else module_graph(self.x.module, kind)
            write_output(render_bytes(graph, fmt), paths[0])
        except (PictureError, InputError) as e:
            raise CommandError(str(e)) from None
        self.say(f"drew step {self.x.position} to {paths[0]}")

    def do_passes(self, rest: str) -> None:
        import irc.passes  # noqa: F401

        from .passmanager import PASSES

        width = max(len(n) for n in PASSES)
        for name in sorted(PASSES):
            self.say(f"{name:<{width}}  {PASSES[name].summary}")


def _one(rest: str, usage: str) -> str:
    words = rest.split()
    if len(words) != 1:
        raise CommandError(f"usage: {usage}")
    return words[0]


def _count(rest: str, what: str) -> int:
    if not rest:
        return 1
    try:
        n = int(rest)
    except ValueError:
        raise CommandError(f"{what} takes a number of steps, got '{rest}'") from None
    return n


def _colour_diff_line(line: str) -> str:
    colour = {"+": "32", "-": "31", "@": "36"}.get(line[:1])
    if colour is None or line.startswith(("+++", "---")):
        return f"\x1b[1m{line}\x1b[0m" if line.startswith(("+++", "---")) else line
    return f"\x1b[{colour}m{line.rstrip(chr(10))}\x1b[0m\n"


def load_module(path: str):
    """Parse and verify the file at ``path``: errors as the CLI reports them."""
    from .fileio import DEFAULT_MAX_INPUT, InputError, read_source
    from .parser import parse
    from .verifier import verify

    try:
        text, name = read_source(path, DEFAULT_MAX_INPUT)
    except InputError as e:
        raise CommandError(str(e)) from None
    module = parse(text, name)
    verify(module)
    return module


# -- completion ----------------------------------------------------------------------------------


def completions(explorer: Explorer, line: str) -> list[str]:
    """The words that can end ``line`` (the text before the cursor); what the terminal's Tab
    offers, kept free of prompt_toolkit so it can be tested."""
    import irc.passes  # noqa: F401

    from .passmanager import PASSES, option_name

    if " " not in line:
        return [c for c in COMMANDS if c.startswith(line)]
    command, _, rest = line.partition(" ")
    if command == "apply":
        brace = rest.rfind("{")
        if brace > rest.rfind("}"):  # inside a pass's options
            name = rest[:brace].rsplit(",", 1)[-1].strip()
            word = rest[brace + 1:].replace(" ", ",").rsplit(",", 1)[-1]
            cls = PASSES.get(name)
            options = [option_name(f) + "=" for f in cls.options()] if cls else []
            return [o for o in options if o.startswith(word)]
        word = rest.rsplit(",", 1)[-1].lstrip()
        return [n for n in sorted(PASSES) if n.startswith(word)]
    if command in ("show", "run", "compare", "bisect", "view"):
        word = rest.rsplit(" ", 1)[-1]
        if command != "view" and " " in rest.strip():
            return []
        names = ["@" + f.sym_name for f in explorer.module.functions]
        if command == "view" and word.startswith("-"):
            return [f for f in ("--cfg", "--dataflow") if f.startswith(word)]
        return [n for n in names if n.startswith(word) or n[1:].startswith(word)]
    return []


def _prompt_session(explorer: Explorer):
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import Completer, Completion

    class _Completer(Completer):
        def get_completions(self, document, complete_event):
            line = document.text_before_cursor
            word = re.split(r"[ ,{]", line)[-1]
            for c in completions(explorer, line):
                yield Completion(c, start_position=-len(word))

    return PromptSession(completer=_Completer(), complete_while_typing=False)


def main(path: str | None) -> int:
    """Run the REPL on ``path`` (or an empty module); the exit status for the CLI."""
    from .module import ModuleOp

    interactive = sys.stdin is not None and sys.stdin.isatty()
    module = load_module(path) if path else ModuleOp.new()
    explorer = Explorer(module, path or "<empty>")
    repl = Repl(explorer, colour=interactive and sys.stdout.isatty())
    if not interactive:
        for line in sys.stdin if sys.stdin is not None else ():
            if not repl.execute(line):
                break
        return 1 if repl.failed else 0
    try:
        session = _prompt_session(explorer)
        read = lambda: session.prompt(f"irc [{explorer.position}]> ")  # noqa: E731
    except ImportError:
        sys.stderr.write("irc: prompt_toolkit is not installed: no completion or line editing\n")
        read = lambda: input(f"irc [{explorer.position}]> ")  # noqa: E731
    repl.say(f"irc repl: {explorer.name} ('help' lists the commands, Tab completes)")
    while True:
        try:
            line = read()
        except EOFError:
            return 0
        except KeyboardInterrupt:
            continue
        if not repl.execute(line):
            return 0

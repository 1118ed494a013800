"""Generate the op and pass references in docs/ from the definitions themselves.

    python -m irc.docgen            # rewrite docs/ops.md and docs/passes.md
    python -m irc.docgen --check    # fail if either is stale or an example is broken

The references are never edited by hand: everything in them comes from the
registries (``irc.registry.dialects()``, ``irc.passmanager.PASSES``) and from
data declared on the classes (``summary``, ``example``, ``traits``, the
docstrings, and a family's ``arity``/``operand_kind``/``from_kind``/``to_kind``).
So a new op or pass shows up in the docs by regenerating them, and a test
(tests/test_docs.py) fails when someone forgets.

Every op's ``example`` is parsed with irc, so the reference cannot show syntax
the parser rejects.  An example may use the values of ``EXAMPLE_VALUES`` without
defining them (the check passes them in as function parameters), may branch to
any block (the check adds it), and is checked against its op's own type rules
(``verify_op``) unless it is a terminator, whose rules are about its context.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
from pathlib import Path

from .diagnostics import IRError

ROOT = Path(__file__).resolve().parent.parent
OPS_MD = Path("docs/ops.md")
PASSES_MD = Path("docs/passes.md")

# The values an example may use without defining them, and their types.  Listed
# at the top of docs/ops.md so that a reader can type-check an example by eye.
EXAMPLE_VALUES: dict[str, str] = {
    "a": "i64", "b": "i64", "c": "i64", "w": "i32",
    "x": "f32", "y": "f32", "z": "f32",
    "cond": "i1",
    "i": "index", "n": "index", "lb": "index", "ub": "index", "step": "index",
    "t": "tensor<4xf32>", "u": "tensor<4xf32>",
    "m": "memref<?xi64>", "m2": "memref<?xi64>",
    "mat": "tensor<3x4xf32>", "mat2": "tensor<4x5xf32>",
    "batch": "tensor<2x3x4xf32>", "batch2": "tensor<2x4x5xf32>",
    "img": "tensor<1x3x8x8xf32>", "kernel": "tensor<4x3x3x3xf32>",
    "ids": "tensor<5xi64>",
    "buf": "memref<?xf32>", "vec": "vector<16xf32>", "vec2": "vector<16xf32>",
}

DIALECT_ORDER = ["builtin", "func", "arith", "math", "cf", "scf", "memref"]


# -- what an op class says about itself ------------------------------------------------------


def _doc(obj) -> str:
    """``obj``'s own docstring (not an inherited one), dedented; '' if none."""
    doc = obj.__dict__.get("__doc__")
    return inspect.cleandoc(doc) if doc else ""


def _op_doc(cls) -> str:
    """The docstring of ``cls`` or of the nearest op class it refines (extui inherits extsi's rules)."""
    from .operation import Operation

    stop = _family(cls) or Operation
    for klass in cls.__mro__:
        if klass is stop or not issubclass(klass, stop):
            break
        doc = _doc(klass)
        if doc:
            return doc
    return ""


def _family(cls) -> type | None:
    """The family base class (dialects/families.py, CmpOp) an op derives from, if any."""
    from irc.dialects.arith import CmpOp
    from irc.dialects.families import CastOp, ElementwiseOp

    for base in (ElementwiseOp, CastOp, CmpOp):
        if issubclass(cls, base):
            return base
    return None


_ARITY_WORDS = {1: "One operand", 2: "Two operands", 3: "Three operands"}


def _kind(kind: str) -> str:
    from irc.dialects.families import KIND_NAMES

    return KIND_NAMES[kind]


def family_rules(cls) -> list[tuple[str, str]]:
    """(heading, text) rows for operands, results and attributes, from the family's class data."""
    from irc.dialects.arith import CmpOp
    from irc.dialects.families import CastOp, ElementwiseOp

    if issubclass(cls, ElementwiseOp):
        return [
            ("Operands", f"{_ARITY_WORDS[cls.arity]} of one type: {_kind(cls.operand_kind)} scalars, "
                         "or tensors of them (the op applies elementwise)."),
            ("Result", "One, of the operands' type."),
            ("Attributes", "None."),
        ]
    if issubclass(cls, CastOp):
        return [
            ("Operand", f"One {_kind(cls.from_kind)} value, or a tensor of them; written "
                        f"`{cls.name} %x : SOURCE to RESULT`."),
            ("Result", f"One {_kind(cls.to_kind)} value of the operand's shape (casts apply elementwise)."),
            ("Attributes", "None."),
        ]
    if issubclass(cls, CmpOp):
        return [
            ("Operands", f"Two of one type: {_kind(cls.operand_kind)} scalars, or tensors of them."),
            ("Result", "`i1`, or a tensor of `i1` of the operands' shape."),
            ("Attributes", "`predicate` (i64): the index of the predicate in "
                           f"[{', '.join(cls.predicates)}], MLIR's numbering; written as its keyword."),
        ]
    return []


def _family_text(cls) -> str:
    family = _family(cls)
    if family is None:
        return ""
    where = "dialects/families.py" if family.__module__.endswith("families") else \
        "dialects/" + family.__module__.rsplit(".", 1)[-1] + ".py"
    summary = _doc(family).split("\n\n")[0].replace("\n", " ")
    return f"Family `{family.__name__}` ({where}): {summary}"


def _trait_names(cls) -> str:
    names = sorted(t.__name__ for t in cls.traits)
    return ", ".join(f"`{n}`" for n in names) if names else "none"


# -- docs/ops.md -----------------------------------------------------------------------------


def _anchor(name: str) -> str:
    return name.replace(".", "").lower()  # GitHub drops dots from heading anchors


def _ordered_dialects() -> list[tuple[str, list[type]]]:
    import irc.dialects  # noqa: F401 - registers every op

    from .registry import dialects

    groups = dialects()
    names = [d for d in DIALECT_ORDER if d in groups] + sorted(d for d in groups if d not in DIALECT_ORDER)
    return [(d, groups[d]) for d in names]


def _dialect_doc(ops: list[type]) -> str:
    module = sys.modules[ops[0].__module__]
    return inspect.cleandoc(module.__doc__ or "")


def render_ops() -> str:
    groups = _ordered_dialects()
    legend = ", ".join(f"`%{n}: {t}`" for n, t in EXAMPLE_VALUES.items())
    out = [
        "# Op reference",
        "",
        "<!-- Generated by `python -m irc.docgen` from the op classes in dialects/; do not edit. -->",
        "",
        "Every registered op, grouped by dialect, as its class declares it: the summary, the",
        "traits, the operand and result rules, the semantics, and an example of its text form.",
        "Every op also has the generic form `\"dialect.op\"(%a, %b) {attrs} : (T, T) -> T`;",
        "see [language.md](language.md) for the syntax and [extending.md](extending.md) for",
        "how to add an op.",
        "",
        "Values an example uses without defining them have these types: " + legend + ".",
        "",
        "Traits: `Pure` (no side effects; removable when unused), `Commutative`, `Terminator`,",
        "`Elementwise` (scalars or tensors alike), `SameOperandsAndResultType`, `ConstantLike`,",
        "`ReturnLike`, `IsolatedFromAbove` (its regions see no outer values), `HasRecursiveEffects`",
        "(its effects are those of the ops it contains).",
        "",
        "| dialect | ops |",
        "|---|---|",
    ]
    for dialect, ops in groups:
        links = ", ".join(f"[`{c.name.split('.', 1)[1]}`](#{_anchor(c.name)})" for c in ops)
        out.append(f"| [{dialect}](#{dialect}) | {links} |")
    for dialect, ops in groups:
        out += ["", f"## {dialect}", ""]
        doc = _dialect_doc(ops)
        if doc:
            out += [doc, ""]
        for cls in ops:
            out += _render_op(cls)
    return "\n".join(out).rstrip() + "\n"


def _render_op(cls) -> list[str]:
    out = [f"### {cls.name}", ""]
    if cls.summary:
        out += [cls.summary, ""]
    example = getattr(cls, "example", "")
    if example:
        out += ["```", example, "```", ""]
    out.append(f"- **Traits:** {_trait_names(cls)}")
    for heading, text in family_rules(cls):
        out.append(f"- **{heading}:** {text}")
    out.append(f"- **Class:** `{cls.__name__}` in `{_source_file(cls)}`")
    out.append("")
    for text in (_op_doc(cls), _family_text(cls)):
        if text:
            out += [text, ""]
    return out


def _source_file(cls) -> str:
    module = cls.__module__
    if module.startswith("irc.dialects."):
        return "dialects/" + module.rsplit(".", 1)[1] + ".py"
    return module.replace(".", "/") + ".py"


# -- docs/passes.md ----------------------------------------------------------------------------


def _option_type(field: dataclasses.Field) -> str:
    return field.type if isinstance(field.type, str) else field.type.__name__


def render_passes() -> str:
    import irc.passes  # noqa: F401 - registers every pass

    from .passmanager import PASSES, option_name

    out = [
        "# Pass reference",
        "",
        "<!-- Generated by `python -m irc.docgen` from the Pass classes in passes/; do not edit. -->",
        "",
        "Run passes with `irc opt FILE -p name1,name2{option=value}` or",
        "`irc.passes.run(module, \"name1,name2\")`; `irc passes` lists them too.  Options are",
        "written with dashes or underscores (`max-iterations=3`).  The IR is verified after every",
        "pass unless `--no-verify` is given.",
        "",
    ]
    for name in sorted(PASSES):
        cls = PASSES[name]
        out += [f"## {name}", "", cls.summary, ""]
        options = cls.options()
        if options:
            out += ["| option | type | default |", "|---|---|---|"]
            for f in options:
                default = ("true" if f.default else "false") if isinstance(f.default, bool) else f.default
                out.append(f"| `{option_name(f)}` | {_option_type(f)} | `{default}` |")
            out.append("")
        else:
            out += ["No options.", ""]
        module_doc = inspect.cleandoc(sys.modules[cls.__module__].__doc__ or "")
        if module_doc:
            out += [module_doc, ""]
        out += [f"Defined by `{cls.__name__}` in `passes/{cls.__module__.rsplit('.', 1)[1]}.py`.", ""]
    return "\n".join(out).rstrip() + "\n"


# -- checking examples -------------------------------------------------------------------------


_VALUE = re.compile(r"%([A-Za-z0-9_$.\-]+)")
_SUCC = re.compile(r"\^([A-Za-z0-9_$.\-]+)(?![A-Za-z0-9_$.\-]*\s*[:(])")


def example_module_text(cls) -> str:
    """The example as a whole module: wrapped in a function unless it is one (or a module)."""
    from .operation import IsolatedFromAbove

    example = cls.example
    # An op that lives at the top level (memref.global), or needs one beside it, has a whole module.
    if cls.has_trait(IsolatedFromAbove) or getattr(cls, "example_is_module", False):
        return example + "\n"
    params = [f"%{n}: {EXAMPLE_VALUES[n]}" for n in dict.fromkeys(_VALUE.findall(example)) if n in EXAMPLE_VALUES]
    lines = [f"func.func @example({', '.join(params)}) {{", "^entry:", "  " + example]
    if not cls.is_terminator:
        lines.append("  func.return")
    for label in dict.fromkeys(_SUCC.findall(example)):
        if label != "entry":
            lines += [f"^{label}:", "  func.return"]
    return "\n".join(lines + ["}"]) + "\n"


def check_example(cls) -> str | None:
    """None if ``cls.example`` parses (and passes the op's own checks); else what is wrong."""
    from .parser import parse

    example = getattr(cls, "example", "")
    if not example:
        return f"{cls.name}: no 'example' attribute on {cls.__name__} ({_source_file(cls)})"
    if "\n" in example:
        return f"{cls.name}: the example must be one line"
    text = example_module_text(cls)
    try:
        module = parse(text, f"<example of {cls.name}>")
    except IRError as e:
        return f"{cls.name}: the example does not parse:\n{e}"
    ops = [op for op in module.walk() if op.name == cls.name]
    if not ops:
        return f"{cls.name}: the example has no '{cls.name}' op"
    if not cls.is_terminator:
        try:
            ops[0].verify_op()
        except IRError as e:
            return f"{cls.name}: the example breaks the op's rules:\n{e}"
    return None


def check_examples() -> list[str]:
    problems = []
    for _, ops in _ordered_dialects():
        for cls in ops:
            problem = check_example(cls)
            if problem:
                problems.append(problem)
    return problems


# -- main ------------------------------------------------------------------------------------------


def generate() -> dict[Path, str]:
    """Each generated file (relative to the repository root) and its text."""
    return {OPS_MD: render_ops(), PASSES_MD: render_passes()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m irc.docgen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; fail if a generated file is stale or an example is broken")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository root (default: %(default)s)")
    args = parser.parse_args(argv)
    problems = check_examples()
    for rel, text in generate().items():
        path = args.root / rel
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                problems.append(f"{rel} is stale: run 'python -m irc.docgen' and commit the result")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {rel}")
    for p in problems:
        print(f"irc.docgen: error: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""Pictures of IR through graphviz: control-flow graphs and dataflow graphs.

* ``cfg_graph(func)``: one box per block (its label, phis, then its ops, long lines and
  long blocks abbreviated), one edge per branch, ``cf.cond_br`` edges labelled true and
  false; the entry block is bold, blocks that return have a double border.
* ``dataflow_graph(func)``: one node per op or parameter, one edge per use, labelled with
  the shape of the value it carries; a ``graph.fused`` op is a cluster holding its scalar
  body, entered at its block arguments and left at its yield.
* ``module_graph(module)``: every function as a cluster, each drawn as the one of the two
  that suits it (``kind='auto'``: dataflow for a one-block function over tensors, CFG
  otherwise).

The graphs are ``graphviz.Digraph`` objects (the ``graphviz`` Python package, imported only
here); ``render`` writes .dot text with no other program, and .svg or .png through the
system's ``dot``, whose absence is a ``PictureError`` with one line to say so.
"""

from __future__ import annotations

import html
import os

from .operation import Operation

MAX_LINE = 64  # characters of one op's text in a block
MAX_BLOCK_OPS = 24  # ops shown per block; the middle of a longer block is elided
MAX_NODES = 3000  # beyond this a picture is unreadable and dot slow: PictureError
MAX_DISPLAY_OPS = 500  # Jupyter draws a module on every display: only small ones

_FONT = "Courier"
_PHI_COLOUR = "#1f5fa8"
_DIM = "#666666"


class PictureError(Exception):
    """A picture that cannot be made (no graphviz package, no ``dot``, too large, bad format)."""


def _graphviz():
    try:
        import graphviz
    except ImportError:
        raise PictureError("pictures need the Python package 'graphviz' (pip install graphviz)") from None
    return graphviz


def _digraph(name: str):
    g = _graphviz().Digraph(name)
    g.attr(fontname=_FONT, rankdir="TB")
    g.attr("node", fontname=_FONT, fontsize="10")
    g.attr("edge", fontname=_FONT, fontsize="9")
    return g


def _clip(text: str, width: int = MAX_LINE) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


class _OpText:
    """Each op of one function as one line of its printed text, names as the printer gives
    them for the whole function (so a picture and ``irc opt`` output name values alike)."""

    def __init__(self, func: Operation):
        from .printer import Printer

        self.printer = Printer()
        self.printer.name_scope(func)

    def line(self, op: Operation) -> str:
        p = self.printer
        p.out, saved_indent = [], p.indent
        p.indent = ""
        p._print_op(op)
        p.indent = saved_indent
        lines = p.text().strip("\n").splitlines()
        text = lines[0].strip() if lines else op.name
        if len(lines) > 1:
            inner = sum(1 for _ in op.walk()) - 1
            text = text.rstrip("{ ").rstrip() + f" {{ {inner} ops }}"
        return text

    def value(self, v) -> str:
        return self.printer.value(v)

    def block(self, b) -> str:
        return self.printer.block(b)


# -- control-flow graphs -------------------------------------------------------------------------


def _block_label(block, names: _OpText, entry: bool) -> str:
    rows = [f'<TR><TD ALIGN="LEFT"><B>{html.escape(names.block(block))}</B>'
            f'{" (entry)" if entry else ""}</TD></TR>']
    ops = list(block.ops)
    phis = [op for op in ops if op.name == "cf.phi"]
    rest = ops[len(phis):]
    for op in phis:
        rows.append(f'<TR><TD ALIGN="LEFT"><FONT COLOR="{_PHI_COLOUR}">'
                    f'{html.escape(_clip(names.line(op)))}</FONT></TD></TR>')
    if len(rest) > MAX_BLOCK_OPS:
        keep = MAX_BLOCK_OPS // 2
        hidden = len(rest) - 2 * keep
        shown = rest[:keep] + [None] + rest[-keep:]
    else:
        shown, hidden = rest, 0
    for op in shown:
        if op is None:
            rows.append(f'<TR><TD ALIGN="LEFT"><FONT COLOR="{_DIM}">… {hidden} more ops …</FONT></TD></TR>')
        else:
            rows.append(f'<TR><TD ALIGN="LEFT">{html.escape(_clip(names.line(op)))}</TD></TR>')
    return '<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">' + "".join(rows) + "</TABLE>>"


def _add_cfg(g, func, prefix: str) -> None:
    names = _OpText(func)
    ids = {}
    blocks = list(func.regions[0].blocks) if func.regions else []
    for i, block in enumerate(blocks):
        ids[block] = f"{prefix}b{i}"
    for i, block in enumerate(blocks):
        term = block.last_op
        returns = term is not None and not term.successors and term.name in ("func.return", "cf.unreachable")
        g.node(ids[block], label=_block_label(block, names, i == 0), shape="box",
               style="bold" if i == 0 else "solid", peripheries="2" if returns else "1")
    for block in blocks:
        term = block.last_op
        if term is None:
            continue
        succs = list(term.successors)
        for k, succ in enumerate(succs):
            if succ not in ids:
                continue
            attrs = {}
            if term.name == "cf.cond_br" and len(succs) == 2:
                attrs = {"label": "true" if k == 0 else "false",
                         "color": "#2a7d2a" if k == 0 else "#b03030",
                         "fontcolor": "#2a7d2a" if k == 0 else "#b03030"}
            g.edge(ids[block], ids[succ], **attrs)


def _function_graph(func: Operation, add):
    """A picture of one function, titled with its name, drawn by ``add(graph, func, prefix)``."""
    g = _digraph(func.sym_name)
    g.attr(label=f"@{func.sym_name}", labelloc="t")
    _check_size(func)
    add(g, func, "")
    return g


def cfg_graph(func: Operation):
    """The control-flow graph of one function."""
    return _function_graph(func, _add_cfg)


# -- dataflow graphs -----------------------------------------------------------------------------


def _shape(t) -> str:
    from .types import ShapedType

    if isinstance(t, ShapedType):
        return "x".join("?" if d is None else str(d) for d in t.shape) + ("x" if t.shape else "") \
            + str(t.element_type)
    return str(t)


def _op_label(op: Operation, names: _OpText) -> str:
    """The op's name and its attributes in short; a constant shows its value."""
    if op.name == "arith.constant":
        value = op.attributes.get("value")
        return _clip(f"{value}", 40)
    text = op.name
    attrs = [f"{k}={v}" for k, v in op.attributes.items() if k not in ("fastmath", "overflow")]
    if attrs:
        text += "\n" + _clip(", ".join(attrs), 40)
    return text


def _add_dataflow(g, func, prefix: str) -> None:
    names = _OpText(func)
    source: dict = {}  # value -> node id its edges leave from
    counter = [0]

    def fresh() -> str:
        counter[0] += 1
        return f"{prefix}n{counter[0]}"

    entry = func.regions[0].entry if func.regions and func.regions[0].first_block is not None else None
    for arg in entry.args if entry is not None else ():
        node = fresh()
        g.node(node, label=f"{names.value(arg)}\n{_shape(arg.type)}", shape="ellipse", style="filled",
               fillcolor="#e8f0fa")
        source[arg] = node

    def edge(value, target: str) -> None:
        from .types import ShapedType

        node = source.get(value)
        if node is None:  # defined outside what is drawn (a nested region's outer value)
            return
        scalar_inside = not isinstance(value.type, ShapedType) and value in scalars
        g.edge(node, target, label=None if scalar_inside else _shape(value.type))

    scalars: set = set()  # values of fused bodies: their edges need no type

    def draw_ops(graph, ops) -> None:
        for op in ops:
            if op.name == "graph.fused":
                draw_fused(graph, op)
                continue
            node = fresh()
            if op.name == "func.return":
                graph.node(node, label="return", shape="doublecircle" if not op.operands else "box",
                           style="rounded,bold")
            elif op.name == "arith.constant":
                graph.node(node, label=_op_label(op, names), shape="plaintext", fontcolor=_DIM)
            elif op.regions:
                inner = sum(1 for _ in op.walk()) - 1
                graph.node(node, label=f"{op.name}\n{{ {inner} ops }}", shape="box3d")
            else:
                results = ", ".join(names.value(r) for r in op.results)
                label = _op_label(op, names)
                graph.node(node, label=f"{results} = {label}" if results else label, shape="box",
                           style="rounded")
            for v in op.operands:
                edge(v, node)
            for r in op.results:
                source[r] = node

    def draw_fused(graph, op) -> None:
        cluster = fresh()
        what = f"graph.fused {names.value(op.results[0])}"
        if op.attributes.get("reduce") is not None:
            what += f" (reduce {op.attributes['reduce']}"
            axes = op.attributes.get("axes")
            what += f" over {axes})" if axes is not None else ")"
        with graph.subgraph(name=f"cluster_{cluster}") as c:
            c.attr(label=what, style="rounded,filled", fillcolor="#fff6e0", color="#c08a00",
                   fontname=_FONT, fontsize="10")
            body = op.regions[0].entry
            for arg, operand in zip(body.args, op.operands):
                node = fresh()
                c.node(node, label=names.value(arg), shape="plaintext")
                edge(operand, node)
                source[arg] = node
                scalars.add(arg)
            scalars.update(r for o in body.ops for r in o.results)
            inner = [o for o in body.ops if o.name != "graph.yield"]
            draw_ops(c, inner)
            out = fresh()
            c.node(out, label="yield", shape="invhouse")
            term = body.last_op
            for v in term.operands if term is not None else ():
                if v in source:
                    c.edge(source[v], out)
            for r in op.results:
                source[r] = out

    for block in func.regions[0].blocks if func.regions else ():
        draw_ops(g, block.ops)


def dataflow_graph(func: Operation):
    """The dataflow graph of one function (meant for tensor functions)."""
    return _function_graph(func, _add_dataflow)


# -- modules -------------------------------------------------------------------------------------


def _is_tensor_function(func) -> bool:
    from .types import TensorType

    if func.regions and func.regions[0].first_block is not func.regions[0].last_block:
        return False
    ft = func.function_type
    return any(isinstance(t, TensorType) for t in (*ft.inputs, *ft.results))


def _kind_for(func, kind: str) -> str:
    if kind == "auto":
        return "dataflow" if _is_tensor_function(func) else "cfg"
    return kind


def _check_size(op) -> None:
    n = sum(1 for _ in op.walk())
    if n > MAX_NODES:
        raise PictureError(f"@{getattr(op, 'sym_name', op.name)} has {n} ops; a picture of more than "
                           f"{MAX_NODES} is unreadable (draw one function with --func)")


def function_graph(func, kind: str = "auto"):
    """One function as ``kind``: 'cfg', 'dataflow' or 'auto'."""
    return dataflow_graph(func) if _kind_for(func, kind) == "dataflow" else cfg_graph(func)


def module_graph(module, kind: str = "auto", title: str | None = None):
    """Every function with a body, each in its own cluster."""
    funcs = [f for f in module.functions if not f.is_declaration]
    _check_size(module)
    g = _digraph("module")
    if title:
        g.attr(label=title, labelloc="t")
    for i, func in enumerate(funcs):
        with g.subgraph(name=f"cluster_f{i}") as c:
            c.attr(label=f"@{func.sym_name}", style="dashed", color="#999999")
            if _kind_for(func, kind) == "dataflow":
                _add_dataflow(c, func, f"f{i}_")
            else:
                _add_cfg(c, func, f"f{i}_")
    return g


# -- output --------------------------------------------------------------------------------------

FORMATS = ("svg", "png", "dot", "pdf")


def format_of(path: str) -> str:
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext == "gv":
        ext = "dot"
    if ext not in FORMATS:
        raise PictureError(f"cannot tell the picture format of '{path}': name it .svg, .png, .pdf or .dot")
    return ext


def render_bytes(graph, fmt: str) -> bytes:
    """The picture as bytes: .dot text needs nothing, the others the system's ``dot``."""
    if fmt == "dot":
        return graph.source.encode("utf-8")
    graphviz = _graphviz()
    try:
        return graph.pipe(format=fmt, quiet=True)
    except graphviz.ExecutableNotFound:
        raise PictureError(f"drawing .{fmt} needs graphviz's 'dot' program, which is not installed "
                           "(apt install graphviz; or write -o FILE.dot)") from None
    except graphviz.CalledProcessError as e:
        message = (e.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        raise PictureError(f"dot failed: {message[0] if message else e}") from None


def render_svg(graph) -> str:
    return render_bytes(graph, "svg").decode("utf-8")


def dot_available() -> bool:
    import shutil

    return shutil.which("dot") is not None

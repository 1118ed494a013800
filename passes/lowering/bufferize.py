"""Bufferization: a function over tensors becomes one over memrefs, op by op into loops.

The contract a caller sees (``irc.compile`` relies on it):

* each tensor parameter becomes a memref parameter of the same shape, read only;
* each tensor result becomes an *output parameter*, appended after the others in
  result order, that the function writes (destination-passing style, as a C
  library would do it); scalar results stay results;
* the original signature is kept in the function attribute ``tensor_signature``.

Inside, every tensor value gets a buffer.  The op that computes a returned value
writes straight into its output parameter; other values get a ``memref.alloc``
freed (``memref.dealloc``) right after its last use, which ``plan-memory`` then
turns into slots of one arena.  An elementwise ``graph.fused`` op writes in
place over an operand buffer that dies at it (same shape and element type, read
at the same index, not a parameter), so a chain of elementwise groups needs no
new memory at all.

Structured control flow (``scf.if``, ``scf.for``, ``scf.while``) with tensor results,
iter_args or operands is bufferized by ``control_flow.py``: each region's block is
straight-line tensor code lowered like the function body, a loop-carried tensor lives
in one *carried* buffer that the body reads and overwrites, and an ``scf.if`` result in
one buffer that either branch writes.  Afterwards the scf ops carry scalars only.

Liveness is measured on one pre-order numbering of the function's ops (``position``,
and ``end``: the last number inside an op's regions).  A value's last use is the end of
the last op *of its own block* that uses it, directly or in a region: a tensor read
inside a loop body stays alive to the end of the loop, and one defined in the body
dies within the iteration.  Buffers allocated in a block are freed in that block.

Each op is lowered by the function registered for its name in
``irc.passes.lowering.LOWERINGS``: ``lower(ctx, op, inputs, output)``, where
``inputs`` are the operand buffers (or scalar values) and ``output`` the result
buffer to fill.  ``ctx.lb`` is an ``irc.builder.Builder`` before the op, at its location,
reusing constants (``reuse_constants``), so index arithmetic reads ``(i * n + j)``.
"""

from __future__ import annotations

from irc.attributes import TypeAttr
from irc.builder import Builder
from irc.diagnostics import IRError
from irc.types import FunctionType, MemRefType, TensorType, index
from irc.values import OpResult

from . import LOWERINGS, blas, control_flow, gemm_library

# Ops whose result may share its operand's buffer (no copy): they only re-read it.
VIEW_OPS = frozenset({"graph.reshape"})


def reads_transposed(op) -> bool:
    """Whether ``op`` is a 2-D ``graph.transpose`` that need not be materialised: every
    user is a 2-D ``graph.matmul``, whose lowering reads the transpose's source with
    its indices swapped (BLAS transpose flags, or the native GEMM's packing and
    kernel; ``LoweringContext.transposed``).  The gradient rules of matmul emit
    exactly this (x^T @ g for dW, g @ W^T for dx)."""
    if op.name != "graph.transpose" or op.results[0].type.rank != 2:
        return False
    if [e.value for e in op.attributes["perm"].elements] != [1, 0]:
        return False
    result = op.results[0]
    return result.first_use is not None and all(
        use.owner.name == "graph.matmul" and use.owner.parent is op.parent
        and all(v.type.rank == 2 for v in use.owner.operands) for use in result.uses)


def memref_of(t: TensorType) -> MemRefType:
    return MemRefType(t.shape, t.element_type)


class LoweringContext:
    """What a lowering function gets besides its op: a builder and the function's buffers."""

    def __init__(self, lb: Builder, bufferizer: Bufferizer, transposed: tuple = ()):
        self.lb = lb
        self.bufferizer = bufferizer
        self.options = bufferizer.options
        self.transposed = transposed
        """Per operand: True where its buffer holds the operand's transpose (``reads_transposed``):
        a 2-D matmul operand of shape (r, c) whose buffer is the (c, r) source, row-major."""

    def temporary(self, type: MemRefType, sizes=()) -> object:
        """A scratch buffer freed after the op being lowered (planned like any other)."""
        buf = self.lb.alloc(type, sizes).value
        self.bufferizer.scratch.append(buf)
        return buf


class Bufferizer:
    def __init__(self, func, options: dict | None = None):
        self.func = func
        self.options = options or {}
        self.buffers: dict = {}  # tensor Value -> memref Value
        self.absorbed: set = set()  # fused ops a GEMM computes in its stores (_lower_with_epilogue)
        self.roots: dict = {}  # memref Value -> the buffer that owns its memory
        self.owned: dict = {}  # live roots allocated here (not parameters), in allocation order
        self.root_last: dict = {}  # root -> position of the last use of any tensor on it
        self.scratch: list = []
        self.transposed: set = set()  # tensor Values bound to their transpose's source buffer
        self.home: dict = {}  # owned root -> the block that allocated it (and frees it)
        self.bound: dict = {}  # root -> the tensor Values that have lived in it
        self.scopes: dict = {}  # root -> scf ops it is carried over (control_flow.py)
        self.lowered: list = []  # ops to erase, in lowering order
        self.structured: list = []  # scf ops that lose their tensors at the end (control_flow.strip)

    # -- the signature -----------------------------------------------------------------------

    def run(self) -> None:
        func = self.func
        ft = func.function_type
        body = func.body
        if not any(isinstance(t, TensorType) for t in (*ft.inputs, *ft.results)) and \
                not any(isinstance(r.type, TensorType) for op in func.walk() for r in op.results):
            return
        if body.first_block is not body.last_block:
            raise IRError(f"tensor-to-loops: function '@{func.sym_name}' uses tensors across blocks; "
                          "only straight-line tensor code is supported", func.loc)
        entry = body.entry
        ret = entry.terminator
        self._number(entry)
        self.last_use = self._last_uses(entry)
        for a in list(entry.args):
            if isinstance(a.type, TensorType):
                a.type = memref_of(a.type)
                self._bind(a, a)
        outputs = {}
        new_results = []
        for k, t in enumerate(ft.results):
            if isinstance(t, TensorType):
                out = entry.add_argument(memref_of(t), f"out{k}" if len(ft.results) > 1 else "out")
                self.roots[out] = out
                outputs[k] = out
            else:
                new_results.append(t)
        func.attributes["tensor_signature"] = TypeAttr(ft)
        func.attributes["function_type"] = TypeAttr(FunctionType([a.type for a in entry.args], new_results))
        # The first return position of a value computed here is where its op writes.
        destination = {}
        for k, v in enumerate(ret.operands):
            if k in outputs and isinstance(v, OpResult) and v not in destination:
                destination[v] = outputs[k]
        self.lower_block(entry, destination)
        self._finish_return(ret, outputs)
        control_flow.drop_tensor_operands(self.structured)
        for op in reversed(self.lowered):
            op.erase()
        control_flow.strip(self.structured)

    def lower_block(self, block, destination: dict) -> None:
        """Lower the ops of ``block`` but its terminator; ``destination``: tensor Value -> the
        buffer its op should write (an output parameter, a loop's carried buffer), if safe."""
        for op in list(block.ops)[:-1]:
            if self._lower(op, destination):
                self.lowered.append(op)

    # -- liveness --------------------------------------------------------------------------------

    def _number(self, entry) -> None:
        """Number the ops of ``entry`` and of the scf regions in it in pre-order: ``position``
        (an op's number) and ``end`` (the last number inside its regions)."""
        self.position, self.end = {}, {}
        counter = 0
        stack = [iter(list(entry.ops))]
        open_ops = []
        while stack:
            op = next(stack[-1], None)
            if op is None:
                stack.pop()
                if open_ops:
                    done = open_ops.pop()
                    self.end[done] = counter - 1
                continue
            self.position[op] = counter
            counter += 1
            if op.name in control_flow.SCF_OPS:
                open_ops.append(op)
                stack.append(iter([o for r in op.regions for b in r.blocks for o in b.ops]))
            else:
                self.end[op] = self.position[op]

    def _last_uses(self, entry) -> dict:
        """For each value of ``entry`` and of the scf blocks in it: the end of the last op of
        the value's own block that uses it (an op nested in a region counts as its ancestor
        in that block)."""
        last: dict = {}
        blocks = [entry]
        while blocks:
            block = blocks.pop()
            for op in block.ops:
                if op.name in control_flow.SCF_OPS:
                    blocks.extend(b for r in op.regions for b in r.blocks)
            for v in [*block.args, *(r for op in block.ops for r in op.results)]:
                for use in v.uses:
                    user = use.owner
                    while user.parent is not block:
                        user = user.parent_op
                    last[v] = max(last.get(v, -1), self.end[user])
        return last

    def reads_after(self, value, op, skip: tuple | None = None) -> bool:
        """Whether ``value`` is read by ``op`` or later (``skip = (owner, index)``: not counting
        that one use of it)."""
        if skip is None:
            return self.last_use.get(value, -1) >= self.position[op]
        block = _defining_block(value)
        for use in value.uses:
            user = use.owner
            if user is skip[0] and use.index == skip[1]:
                continue
            while user.parent is not block:
                user = user.parent_op
            if self.end[user] >= self.position[op]:
                return True
        return False

    def writable(self, buf, op, init: tuple | None = None) -> bool:
        """Whether ``op`` may write into ``buf`` (as a result's destination or a loop's carried
        buffer): no tensor living in its memory is read by ``op`` or after it, except at the
        element being written by an elementwise op (the in-place rule), or ``init = (x, user,
        k)``: ``x`` as the operand ``k`` of ``user`` (a loop's init, a GEMM epilogue's D).  Values of blocks that do not enclose ``op`` are dead
        there (a sibling region, an earlier loop's body), and values from outside an scf op
        the buffer is carried over are not read inside it (control_flow.py)."""
        root = self.roots.get(buf, buf)
        here = op.parent
        for w in self.bound.get(root, ()):
            if not _encloses(_defining_block(w), here):
                continue
            if any(s.is_ancestor_of(op) and not _inside(w, s) for s in self.scopes.get(root, ())):
                continue
            if init is not None and w is init[0]:
                read = self.reads_after(w, op, init[1:])
            else:
                read = self.reads_after(w, op)
            if read and not (self.last_use.get(w, -1) <= self.end[op] and self._reads_at_output_index(op, root)):
                return False
        return True

    def _reads_at_output_index(self, op, root) -> bool:
        """Whether ``op`` is elementwise and reads ``root``'s memory only at the element it writes,
        or is a ``graph.dynamic_update_slice`` whose operand is ``root`` itself (it reads that
        only outside the window it writes, and its lowering then writes just the window)."""
        if op.name == "graph.dynamic_update_slice":
            return self._updates_in_place(op, root)
        if op.name != "graph.fused" or op.reduction:
            return False
        t = op.results[0].type
        identity = list(range(t.rank))
        for v, m in zip(op.operands, op.maps):
            buf = self.buffers.get(v) if isinstance(v.type, TensorType) else None
            if buf is None or self.roots.get(buf) is not root:
                continue
            if buf is not root or v.type is not t or list(m) != identity or v in self.transposed:
                return False
        return True

    def _bind(self, value, buf) -> None:
        self.buffers[value] = buf
        root = self.roots.setdefault(buf, buf)
        self.root_last[root] = max(self.root_last.get(root, -1), self.last_use.get(value, -1))
        self.bound.setdefault(root, []).append(value)

    def destination_for(self, destination: dict, result, op):
        """The buffer ``destination`` proposes for ``result`` of ``op``, if ``op`` may write it."""
        buf = destination.get(result)
        if buf is None or not self.writable(buf, op):
            return None
        return buf

    # -- one op --------------------------------------------------------------------------------

    def _lower(self, op, destination: dict) -> bool:
        """Lower ``op`` if it involves tensors; True if it is to be erased."""
        if op.name in control_flow.SCF_OPS:
            control_flow.lower(self, op, destination)
            return False
        if op.name == "tensor.dim":
            self._lower_dim(op)
            return True
        if op.name == "tensor.extract":
            self._lower_extract(op)
            return True
        if not any(isinstance(r.type, TensorType) for r in op.results):
            if any(isinstance(v.type, TensorType) for v in op.operands):
                raise IRError(f"tensor-to-loops cannot lower '{op.name}' on tensors", op.loc)
            return False
        if op.name == "arith.constant" and op.results[0].first_use is None:
            return True
        dest = self.destination_for(destination, op.results[0], op) if len(op.results) == 1 else None
        if reads_transposed(op) and dest is None:
            self._bind(op.results[0], self.buffers[op.operands[0]])  # a view, read with swapped indices
            self.transposed.add(op.results[0])
            return True
        if op in self.absorbed:  # computed by the GEMM whose epilogue it is (gemm_library.epilogue)
            self._free_dead(op, [self.buffers[v] for v in op.operands if isinstance(v.type, TensorType)],
                            self.position[op])
            return True
        lower = LOWERINGS.get(op.name)
        if self.options.get("gpu"):  # the GPU target's simple forms (gpu_rows.py)
            from .gpu_rows import GPU_LOWERINGS

            lower = GPU_LOWERINGS.get(op.name, lower)
        elif self.options.get("blas") and blas.wants_blas(op, list(op.operands)):
            consumer = gemm_library.column_consumer(op, self.position, self.transposed,
                                                    blas.thread_parts(self.options, op))
            if consumer is not None:
                return self._lower_with_consumer(op, consumer, destination, blas.lower_matmul_blas)
            lower = blas.lower_matmul_blas
        elif self.options.get("gemm_library") and gemm_library.wants_library(
                op, list(op.operands), tuple(v in self.transposed for v in op.operands)):
            found = gemm_library.epilogue(op, self.position)
            if found is not None:
                return self._lower_with_epilogue(op, *found, destination)
            found = gemm_library.bias_epilogue(op, self.position, self.transposed)
            if found is not None:
                return self._lower_with_bias(op, *found, destination)
            consumer = gemm_library.column_consumer(op, self.position, self.transposed,
                                                    gemm_library.library_parts(self.options, op))
            if consumer is not None:
                return self._lower_with_consumer(op, consumer, destination, gemm_library.lower_matmul_library)
            lower = gemm_library.lower_matmul_library
        if lower is None:
            raise IRError(f"tensor-to-loops has no lowering for '{op.name}' (elementwise ops on "
                          "tensors are lowered after 'fuse-elementwise')", op.loc)
        if len(op.results) != 1:
            raise IRError(f"tensor-to-loops: '{op.name}' must have one result", op.loc)
        result = op.results[0]
        position = self.position[op]
        lb = _builder(op)
        inputs = [self.buffers[v] if isinstance(v.type, TensorType) else v for v in op.operands]
        if op.name in VIEW_OPS and dest is None:
            output = lb.view(inputs[0], 0, memref_of(result.type), list(op.operands[1:])).value
            self.roots[output] = self.roots[inputs[0]]
        else:
            output = dest or self._in_place(op, inputs, position) or self._allocate(lb, result, op)
            transposed = tuple(v in self.transposed for v in op.operands)
            if any(transposed) and op.name != "graph.matmul":
                raise IRError(f"tensor-to-loops: '{op.name}' cannot read a transposed operand", op.loc)
            lower(LoweringContext(lb, self, transposed), op, inputs, output)
        self._bind(result, output)
        self._free_dead(op, inputs, position)
        return True

    def _lower_with_epilogue(self, op, fused, d, alpha: float, destination: dict) -> bool:
        """The matmul ``op`` and the elementwise ``fused`` op after it as one library call that
        writes ``d + alpha * (A @ B)`` where ``fused``'s result goes."""
        result, lb = fused.results[0], _builder(op)
        output = self.destination_for(destination, result, op) or \
            self._epilogue_over_d(destination.get(result), op, fused, d) or self._allocate(lb, result, fused)
        return self._lower_into_gemm(lb, op, fused, output, epilogue=(self.buffers[d], alpha))

    def _lower_with_bias(self, op, fused, bias, relu: bool, destination: dict) -> bool:
        """The matmul ``op`` and the bias (and ReLU) ``fused`` after it as one library call that
        writes ``relu?(A @ B + bias)`` where ``fused``'s result goes (``gemm_library.bias_epilogue``)."""
        result, lb = fused.results[0], _builder(op)
        output = self.destination_for(destination, result, op) or self._allocate(lb, result, fused)
        return self._lower_into_gemm(lb, op, fused, output, bias=(self.buffers[bias], relu))

    def _lower_into_gemm(self, lb, op, fused, output, **stores) -> bool:
        """The library call that computes the matmul ``op`` and ``fused`` after it into ``output``
        (``stores``: what its stores add, ``lower_matmul_library``'s ``epilogue`` or ``bias``)."""
        inputs = [self.buffers[v] for v in op.operands]
        transposed = tuple(v in self.transposed for v in op.operands)
        gemm_library.lower_matmul_library(LoweringContext(lb, self, transposed), op, inputs, output, **stores)
        self._bind(op.results[0], output)
        self._bind(fused.results[0], output)
        self.absorbed.add(fused)
        self._free_dead(op, inputs, self.position[op])
        return True

    def _lower_with_consumer(self, op, fused, destination: dict, lower) -> bool:
        """The matmul ``op`` split across threads (``lower``: the library GEMM's or BLAS's
        lowering), each part followed by the elementwise ``fused`` op over the part's columns
        (``gemm_library.column_consumer``): the GEMM writes C where ``fused``'s result goes, and
        ``fused`` then rewrites each element of it in place."""
        from .elementwise import _element

        result = fused.results[0]
        lb = _builder(op)
        inputs = [self.buffers[v] for v in op.operands]
        output = self.destination_for(destination, result, op) or self._allocate(lb, result, fused)
        operands = [output if v is op.results[0] else self.buffers[v] if isinstance(v.type, TensorType) else v
                    for v in fused.operands]
        rows = lb.dim(output, 0)

        def consumer(col_begin, col_end) -> None:
            with lb.for_(0, rows) as i, lb.for_(col_begin, col_end) as j:
                lb.store(_element(lb, fused, operands, [i.iv, j.iv]), output, [i.iv, j.iv])

        transposed = tuple(v in self.transposed for v in op.operands)
        lower(LoweringContext(lb, self, transposed), op, inputs, output, consumer=consumer)
        self._bind(op.results[0], output)
        self._bind(result, output)
        self.absorbed.add(fused)
        self._free_dead(op, inputs, self.position[op])
        return True

    def _epilogue_over_d(self, buf, op, fused, d):
        """``buf`` when it holds ``d`` itself and the GEMM may write its result over it: the
        library reads each element of D just before writing the same element of C (a loop's
        ``w = w - lr * dw``, updated in its carried buffer), and nothing else reads it later."""
        if buf is None or self.buffers.get(d) is not buf or d in self.transposed \
                or any(self.roots.get(self.buffers[v]) is self.roots.get(buf) for v in op.operands):
            return None
        return buf if self.writable(buf, op, (d, fused, fused.operands.index(d))) else None

    def _lower_dim(self, op) -> None:
        from irc.dialects.memref import DimOp

        new = DimOp([self.buffers[op.operands[0]], op.operands[1]], [index], loc=op.loc)
        op.parent.insert_before(new, op)
        op.results[0].replace_all_uses_with(new.results[0])

    def _lower_extract(self, op) -> None:
        """``tensor.extract`` reads the operand's buffer (which stays alive to the return at least),
        after a ``cf.assert`` that every index is in range: the index is data, and compiled code
        must fault where the interpreter does rather than read outside the buffer."""
        from irc.dialects.memref import LoadOp

        from irc.attributes import StringAttr

        lb = _builder(op)
        buf = self.buffers[op.operands[0]]
        shape = op.operands[0].type.shape
        with lb.located(op.loc):
            for axis, i in enumerate(op.operands[1:]):
                inside = lb.compare("ult", i, lb.dim(buf, axis) if shape[axis] is None else shape[axis])
                lb.op("cf.assert", inside, result=[],
                      msg=StringAttr(f"tensor.extract: index out of bounds in dimension {axis}"))
        new = LoadOp([buf, *op.operands[1:]], [op.results[0].type], loc=op.loc)
        op.parent.insert_before(new, op)
        op.results[0].replace_all_uses_with(new.results[0])

    def allocate(self, lb: Builder, result, op):
        """A new buffer for ``result`` (of ``op``), freed in ``op``'s block when it dies."""
        return self._allocate(lb, result, op)

    def _allocate(self, lb: Builder, result, op):
        t = memref_of(result.type)
        if not t.has_static_shape:
            raise IRError(f"tensor-to-loops: the result {result.type} of '{op.name}' has dynamic "
                          "dimensions; specialise shapes first (irc.compile does)", op.loc)
        buf = lb.alloc(t).value
        self.owned[buf] = None
        self.home[buf] = op.parent
        return buf

    def _updates_in_place(self, op, root) -> bool:
        dst, update = (self.buffers.get(v) for v in op.operands[:2])
        return dst is root and self.roots.get(update, update) is not root

    def _in_place(self, op, inputs, position: int):
        """An operand buffer the op may overwrite: elementwise (or a dynamic_update_slice's
        operand, see ``_reads_at_output_index``), dead after this op, owned here; or the
        destination of a ``graph.scatter_add`` (which adds to it where it stands)."""
        if op.name == "graph.scatter_add":
            return self._scatter_destination(op, inputs, position)
        if op.name == "graph.dynamic_update_slice":
            buf = inputs[0]
            if buf in self.owned and self.roots.get(buf) is buf and self.root_last.get(buf, -1) <= position \
                    and self.home.get(buf) is op.parent and self._updates_in_place(op, buf):
                return buf
            return None
        if op.name != "graph.fused" or op.reduction:
            return None
        t = op.results[0].type
        identity = list(range(t.rank))
        for v, buf, m in zip(op.operands, inputs, op.maps):
            if v.type is not t or list(m) != identity:
                continue
            root = self.roots.get(buf)
            if root is not buf or root not in self.owned or self.root_last.get(root, -1) > position \
                    or self.home.get(root) is not op.parent:
                continue
            # Every read of this memory in the op must be at the element being written.
            if all(self.roots.get(b) is not root or (b is buf and list(mm) == identity)
                   for b, mm in zip(inputs, op.maps)):
                return buf
        return None

    def _scatter_destination(self, op, inputs, position: int):
        """The destination's buffer, when it is dead after the op, owned here, and not read as
        the indices or the updates."""
        buf = inputs[0]
        root = self.roots.get(buf)
        if root is not buf or root not in self.owned or self.root_last.get(root, -1) > position \
                or self.home.get(root) is not op.parent or any(self.roots.get(b) is root for b in inputs[1:]):
            return None
        return buf

    def free_dead_roots(self, op, roots) -> None:
        """Free, after ``op``, the owned ``roots`` of its block whose tensors are all dead there."""
        after = Builder().after_op(op)
        for root in dict.fromkeys(roots):
            if root in self.owned and self.home.get(root) is op.parent and self.root_last.get(root, -1) <= self.end[op]:
                after.insert(_dealloc(root, op.loc))
                self.owned.pop(root, None)

    def free_block(self, block, before) -> None:
        """Free, before ``before`` (a region's terminator), the owned buffers ``block`` allocated."""
        for root in [r for r in self.owned if self.home.get(r) is block]:
            block.insert_before(_dealloc(root, before.loc), before)
            self.owned.pop(root, None)

    def _free_dead(self, op, inputs, position: int) -> None:
        """Free the op's scratch buffers, and owned buffers whose every tensor is dead after it."""
        after = Builder().after_op(op)
        for buf in self.scratch:
            after.insert(_dealloc(buf, op.loc))
        self.scratch.clear()
        result_root = self.roots.get(self.buffers[op.results[0]])
        for buf in inputs:
            root = self.roots.get(buf)
            if root in self.owned and root is not result_root and self.root_last.get(root, -1) <= position \
                    and self.home.get(root) is op.parent:
                after.insert(_dealloc(root, op.loc))
                self.owned.pop(root, None)
        if result_root in self.owned and self.root_last.get(result_root, -1) <= position \
                and self.home.get(result_root) is op.parent:
            after.insert(_dealloc(result_root, op.loc))  # computed but never used
            self.owned.pop(result_root, None)

    # -- the return ---------------------------------------------------------------------------------

    def _finish_return(self, ret, outputs: dict) -> None:
        from irc.dialects.memref import CopyOp

        lb = _builder(ret)
        scalars = []
        for k, v in enumerate(list(ret.operands)):
            if k not in outputs:
                scalars.append(v)
            elif self.buffers[v] is not outputs[k]:
                lb.insert(CopyOp([self.buffers[v], outputs[k]], []))
        for root in list(self.owned):
            lb.insert(_dealloc(root, ret.loc))
        self.owned.clear()
        ret.set_operands(scalars)


def _defining_block(value):
    return value.op.parent if isinstance(value, OpResult) else value.owner


def _encloses(block, inner) -> bool:
    """Whether ``block`` is ``inner`` or a block that ``inner`` is nested in."""
    while inner is not None:
        if inner is block:
            return True
        op = inner.parent_op
        inner = op.parent if op is not None else None
    return False


def _inside(value, op) -> bool:
    """Whether ``value`` is defined inside ``op``'s regions."""
    block = _defining_block(value)
    owner = block.parent_op
    return owner is not None and (owner is op or op.is_ancestor_of(owner))


def _builder(op) -> Builder:
    """A builder that inserts before ``op``, at its location, reusing index constants."""
    return Builder(loc=op.loc, reuse_constants=True).before_op(op)


def _dealloc(buf, loc):
    from irc.dialects.memref import DeallocOp

    op = DeallocOp([buf], [])
    op.loc = loc
    return op


def bufferize(func, options: dict | None = None) -> None:
    """Rewrite ``func`` over memrefs (see the module docstring); no-op without tensors.
    ``options``: ``blas`` sends large float matmuls to BLAS (see blas.py)."""
    Bufferizer(func, options).run()

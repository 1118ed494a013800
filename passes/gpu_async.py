"""gpu-async: make a host function's copies and launches asynchronous, ordered by their data.

Each ``gpu.memcpy`` and ``gpu.launch_func`` at the top level of a host function becomes its
``async`` form, waiting for exactly the earlier work it must follow: the last write of every
buffer it reads or writes (read after write, write after write) and the reads since then of
every buffer it writes (write after read).  A kernel writes the parameters it stores to (or
copies into); views are followed to the buffer they view.  Work on unrelated buffers shares no
token, so a runtime may run it at once (the pycuda driver puts it on different streams):
the copies of independent inputs overlap, and independent kernels run side by side.

Host code waits only where it must: a ``gpu.wait`` on the pending tokens of a buffer comes
before any other host op that uses it (reading a result copied back, freeing a buffer), and
one ``gpu.wait`` for everything before each return; ``gpu.dealloc`` moves to the end of the
function, so that freeing an input does not hold up the copies of the results.

The interpreter checks the result: it runs async work lazily, in the order the tokens allow
that is the furthest from program order, so a missing dependency changes the results.
"""

from __future__ import annotations

from irc.passmanager import Pass


def _root(value):
    """The buffer a memref value views (through memref.view), or the value itself."""
    while value.defining_op is not None and value.defining_op.name == "memref.view":
        value = value.defining_op.operands[0]
    return value


def written_parameters(kernel) -> set[int]:
    """The positions of the memref parameters that ``kernel`` stores to or copies into."""
    args = list(kernel.args)
    written = set()
    for op in kernel.walk():
        target = None
        if op.name == "memref.store":
            target = op.operands[1]
        elif op.name == "memref.copy":
            target = op.operands[1]
        if target is not None:
            root = _root(target)
            if root in args:
                written.add(args.index(root))
    return written


class GPUAsync(Pass):
    """Make copies and launches async with the dependencies their buffers need; wait where the host reads."""

    name = "gpu-async"

    def triggers(self):
        return frozenset({"gpu.memcpy", "gpu.launch_func"})

    def run(self, module, stats) -> None:
        symbols = module.symbol_table()
        for func in module.functions:
            if func.is_declaration or func.body.first_block is not func.body.last_block:
                continue
            if not any(op.name in ("gpu.memcpy", "gpu.launch_func") for op in func.body.entry.ops):
                continue
            _schedule(func.body.entry, symbols, stats)


def _schedule(block, symbols, stats) -> None:
    from irc.dialects import gpu

    last_write: dict = {}
    readers: dict = {}
    made_async = False
    end = block.terminator
    if end is not None and end.name == "func.return":
        for op in list(block.ops):
            if op.name == "gpu.dealloc":
                op.move_before(end)  # free device buffers after the work, so no wait holds it up

    def pending(root) -> list:
        tokens = ([last_write[root]] if root in last_write else []) + readers.get(root, [])
        return list(dict.fromkeys(tokens))

    def wait_before(op, tokens) -> None:
        if tokens:
            op.parent.insert_before(gpu.WaitOp(tokens, [], loc=op.loc), op)
            stats.add("waits")

    for op in list(block.ops):
        if op.name in ("gpu.memcpy", "gpu.launch_func") and not op.results and not op.num_deps:
            if op.name == "gpu.memcpy":
                reads, writes = {_root(op.source)}, {_root(op.target)}
            else:
                kernel = op.kernel(symbols)
                if kernel is None:
                    continue
                written = written_parameters(kernel)
                memrefs = [(k, _root(v)) for k, v in enumerate(op.kernel_args) if v.type.is_shaped]
                writes = {r for k, r in memrefs if k in written}
                reads = {r for k, r in memrefs if k not in written}
            deps = []
            for r in reads | writes:
                if r in last_write:
                    deps.append(last_write[r])
            for w in writes:
                deps.extend(readers.get(w, []))
            deps = list(dict.fromkeys(deps))
            if op.name == "gpu.memcpy":
                new = gpu.MemcpyOp.build(op.target, op.source, deps)
            else:
                new = gpu.LaunchFuncOp.build(op.module_name, op.kernel_name, op.sizes[:3], op.sizes[3:],
                                             op.kernel_args, deps)
                new.attributes.update({k: v for k, v in op.attributes.items() if k not in new.attributes})
            new.loc = op.loc
            op.parent.insert_before(new, op)
            op.erase()
            token = new.results[0]
            for r in reads - writes:
                readers.setdefault(r, []).append(token)
            for w in writes:
                last_write[w] = token
                readers[w] = []
            made_async = True
            stats.add(f"{op.name}-async")
        elif op.name == "func.return":
            if made_async:
                op.parent.insert_before(gpu.WaitOp([], [], loc=op.loc), op)
        elif op.name not in ("arith.constant", "gpu.alloc", "memref.view", "memref.dim") and made_async:
            used = {_root(v) for inner in op.walk() for v in inner.operands if v.type.is_shaped}
            tokens = []
            for r in used:
                tokens.extend(pending(r))
                last_write.pop(r, None)
                readers.pop(r, None)
            wait_before(op, list(dict.fromkeys(tokens)))

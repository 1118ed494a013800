"""A host function after the GPU stages, as a typed schedule the driver replays without the interpreter.

After ``GPU_STAGES`` a host function is straight-line code over static shapes: constants, the
arguments made host buffers (``bufferization.to_memref``), device allocations, copies and
launches (usually ``async``, ordered by tokens), views of device buffers, waits and frees, and
``bufferization.to_tensor`` of the host buffers it returns.  ``build_schedule`` reads that code
once into a list of steps (``Alloc``, ``Copy``, ``Launch``, ``View``, ``Join``) over numbered
slots, with one wait at the end and the frees after it, with the stream of every asynchronous step decided here (the
stream of a dependency that was the last work on its stream, else the next of ``STREAMS``) and the kernel parameters laid out; ``driver.CudaDevice.run_schedule`` replays it,
which is Python work per step rather than per op of the host function.

The schedule also says what a call may skip when it is given arrays that already live on the
device: a device buffer that only receives an argument (``Copy`` from the argument) and that no
kernel writes can be the caller's memory itself (``Slot.borrowable``), and a result copied back
from a whole device allocation can be handed to the caller as it is (``Result.device_slot``).

A function with anything else (a dynamic size, a host op the GPU stages do not make) has no
schedule: ``build_schedule`` raises ``NotSchedulable`` naming the op, and the driver runs the
host function in the interpreter as before.  No pycuda here: this module only reads IR.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from irc.types import FloatType, IndexType, IntegerType, MemRefType, TensorType

STREAMS = 4  # streams for asynchronous work without dependencies (as driver.CudaDevice has)
SYNC = -1  # the stream of synchronous work


class NotSchedulable(Exception):
    """The host function is not straight-line GPU host code over static shapes."""


@dataclass
class Slot:
    """A buffer of the schedule: ``device`` (an allocation), ``view`` (of ``base`` at byte
    ``offset``), ``host`` (a host buffer the function allocates) or ``arg`` (argument ``param``)."""

    kind: str
    shape: tuple
    dtype: np.dtype
    param: int = -1
    base: int = -1
    offset: int = 0
    borrowable: bool = False  # a device buffer that only receives argument ``param`` and is never written
    nbytes: int = 0

    def __post_init__(self) -> None:
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass(frozen=True)
class Alloc:
    slot: int


@dataclass(frozen=True)
class Copy:
    """``gpu.memcpy``: ``direction`` is ``htod``, ``dtoh`` or ``dtod``."""

    direction: str
    dst: int
    src: int
    waits: tuple  # tokens of other streams this step waits for (an event each)
    token: int | None
    stream: int


@dataclass(frozen=True)
class Launch:
    """``gpu.launch_func``: ``args`` are ``("slot", n)`` (a device buffer: its pointer, then its
    sizes) or ``("scalar", value)``; ``signature`` is the struct format of the parameters."""

    module: str
    kernel: str
    grid: tuple
    block: tuple
    args: tuple
    signature: str
    waits: tuple
    token: int | None
    stream: int


@dataclass(frozen=True)
class View:
    slot: int


@dataclass(frozen=True)
class Join:
    """``gpu.wait async``: a token standing for its dependencies."""

    waits: tuple
    token: int
    stream: int


@dataclass(frozen=True)
class Result:
    """A returned value: the host buffer ``slot``, argument ``param`` or the constant ``value``.
    ``device_slot``/``copy_step``: the whole device allocation the buffer is copied from, by
    that step, when that is its only content (a caller who passed device arrays gets it)."""

    slot: int = -1
    param: int = -1
    value: object = None
    device_slot: int = -1
    copy_step: int = -1


@dataclass
class Schedule:
    """The steps of one host function.  ``steps`` hold no host waits and no frees: the host
    reads nothing before it returns, so one wait for ``streams`` at the end is enough, after
    which the device buffers ``frees`` go back to the pool (a buffer's memory is therefore not
    reused within the call that frees it, as it could be by the interpreted host function)."""

    name: str
    params: list  # (name, type, shape, numpy dtype) per argument
    slots: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    results: list = field(default_factory=list)
    tokens: int = 0
    joins_needing_events: frozenset = frozenset()  # tokens waited on from another stream or the host
    streams: tuple = ()  # the streams its steps use (SYNC for synchronous ones): what a full wait waits for
    frees: list = field(default_factory=list)  # device slots freed after the final wait


def _dtype(t) -> np.dtype:
    from irc.dialects.memref import storage_dtype

    return np.dtype(storage_dtype(t))


_SCALAR_FORMAT = {"f16": "e", "f32": "f", "f64": "d"}


def _scalar(value, t) -> tuple:
    """A kernel's scalar parameter: its numpy value and struct format (as driver.launch packs it)."""
    if isinstance(t, IndexType):
        return np.int64(value), "q"
    if isinstance(t, IntegerType):
        width = max(8, t.width)
        return np.dtype(f"int{width}").type(value), {8: "b", 16: "h", 32: "i", 64: "q"}[width]
    if isinstance(t, FloatType) and t.kind in _SCALAR_FORMAT:
        return np.dtype(t.kind.replace("f", "float")).type(value), _SCALAR_FORMAT[t.kind]
    raise NotSchedulable(f"a kernel parameter of type {t}")


def _written_params(kernel) -> set:
    """Positions of the kernel's memref parameters that it may write (anything but a load or a
    size query counts)."""
    written = set()
    for i, arg in enumerate(kernel.body.entry.args):
        if not isinstance(arg.type, MemRefType):
            continue
        for use in arg.uses:
            if use.owner.name not in ("memref.load", "vector.load", "memref.dim") or use.index != 0:
                written.add(i)
    return written


def build_schedule(module, name: str) -> Schedule:
    """The schedule of host function ``name`` of a lowered module (see the module docstring)."""
    from irc.dialects.gpu import AsyncTokenType

    from irc.patterns import constant_value

    func = module.function(name)
    ft = func.function_type
    args = list(func.body.entry.args)
    params = []
    for i, (a, t) in enumerate(zip(args, ft.inputs)):
        shaped = isinstance(t, (TensorType, MemRefType))
        params.append((a.name_hint or f"arg{i}", t, tuple(t.shape) if shaped else None, _dtype(t) if shaped else None))
    sched = Schedule(name, params)
    if func.body.first_block is not func.body.last_block:
        raise NotSchedulable("control flow in the host function")
    values: dict = {}  # SSA value -> ("const", v) | ("slot", n) | ("token", n) | ("tensor", param)
    stream_of: dict = {}
    next_stream = 0
    copies_into: dict = {}  # slot -> [(step index, src slot)]
    kernels = {}
    for mod in module.body.ops:
        if mod.name == "gpu.module":
            for k in mod.body.ops:
                if k.name == "gpu.func":
                    kernels[(mod.sym_name, k.sym_name)] = k
    written_slots: set = set()

    def slot(kind, t, **kw) -> int:
        if not t.has_static_shape:
            raise NotSchedulable(f"the dynamic shape {t}")
        sched.slots.append(Slot(kind, tuple(t.shape), _dtype(t), **kw))
        return len(sched.slots) - 1

    def operand(v):
        known = values.get(v)
        if known is None:
            raise NotSchedulable(f"a value made by '{v.defining_op.name if v.defining_op else 'a block'}'")
        return known

    def const(v):
        kind, x = operand(v)
        if kind != "const":
            raise NotSchedulable("a size computed at run time")
        return x

    tail: dict = {}  # stream -> the token of the last work issued on it

    def place(deps) -> tuple[int, tuple]:
        """The stream of an async step and the dependencies it waits for by event: it follows
        a dependency that is the last work of its stream (the stream orders them), else it
        takes the next stream, so that steps depending on the same work (kernels reading
        one input) do not queue behind each other."""
        nonlocal next_stream
        for d in deps:
            if tail.get(stream_of[d]) == d:
                stream, waits = stream_of[d], tuple(x for x in deps if x != d)
                break
        else:
            stream, waits = next_stream % STREAMS, tuple(deps)
            next_stream += 1
        waited_elsewhere.update(waits)
        return stream, waits

    def token_deps(op) -> tuple:
        return tuple(operand(v)[1] for v in op.operands[:getattr(op, "num_deps", 0)])

    def new_token(op, stream) -> int | None:
        if not op.results or not isinstance(op.results[0].type, AsyncTokenType):
            return None
        token = sched.tokens
        sched.tokens += 1
        values[op.results[0]] = ("token", token)
        stream_of[token] = stream
        tail[stream] = token
        return token

    for i, a in enumerate(args):
        if isinstance(a.type, MemRefType):  # a buffer the caller passes (and may receive results in)
            values[a] = ("slot", slot("arg", a.type, param=i))
        elif isinstance(a.type, TensorType):
            values[a] = ("tensor", i)
        else:
            raise NotSchedulable(f"a scalar parameter ({a.type})")
    waited_elsewhere: set = set()
    for op in func.body.entry.ops:
        n = op.name
        if n == "arith.constant":
            attr = constant_value(op.results[0])
            if attr is None or not hasattr(attr, "value") or isinstance(op.results[0].type, TensorType):
                raise NotSchedulable("a constant that is not a scalar")
            values[op.results[0]] = ("const", attr.value)
        elif n == "bufferization.to_memref":
            kind, param = operand(op.operands[0])
            if kind != "tensor":
                raise NotSchedulable("to_memref of a computed tensor")
            values[op.results[0]] = ("slot", slot("arg", op.results[0].type, param=param))
        elif n == "memref.alloc":
            values[op.results[0]] = ("slot", slot("host", op.results[0].type))
        elif n == "gpu.alloc":
            if op.operands:
                raise NotSchedulable("an asynchronous or dynamic gpu.alloc")
            s = slot("device", op.results[0].type)
            values[op.results[0]] = ("slot", s)
            sched.steps.append(Alloc(s))
        elif n == "memref.view":
            base = operand(op.operands[0])[1]
            if sched.slots[base].kind not in ("device", "view") or len(op.operands) != 2:
                raise NotSchedulable("a view of host memory or with dynamic sizes")
            root = base
            offset = int(const(op.operands[1]))
            while sched.slots[root].kind == "view":
                offset += sched.slots[root].offset
                root = sched.slots[root].base
            s = slot("view", op.results[0].type, base=root, offset=offset)
            values[op.results[0]] = ("slot", s)
            sched.steps.append(View(s))
        elif n == "memref.dim":
            values[op.results[0]] = ("const", op.operands[0].type.shape[int(const(op.operands[1]))])
        elif n == "gpu.memcpy":
            deps = token_deps(op)
            dst, src = (operand(v)[1] for v in op.operands[len(deps):len(deps) + 2])
            kinds = sched.slots[dst].kind, sched.slots[src].kind
            on_device = [k in ("device", "view") for k in kinds]
            direction = {(True, False): "htod", (False, True): "dtoh", (True, True): "dtod"}.get(tuple(on_device))
            if direction is None:
                raise NotSchedulable("a host-to-host copy")
            stream, waits = place(deps) if op.results else (SYNC, ())
            token = new_token(op, stream) if op.results else None
            copies_into.setdefault(dst, []).append((len(sched.steps), src))
            if direction == "dtod":  # (the copy into it from an argument is what borrowing replaces)
                written_slots.add(_root(sched, dst))
            sched.steps.append(Copy(direction, dst, src, waits, token, stream))
        elif n == "gpu.launch_func":
            deps = token_deps(op)
            kernel = kernels.get((op.module_name, op.kernel_name))
            if kernel is None:
                raise NotSchedulable(f"no kernel @{op.module_name}::@{op.kernel_name}")
            sizes = tuple(int(const(v)) for v in op.sizes)
            if not _runnable(sizes):  # the interpreter's path reports it at the op
                raise NotSchedulable("a launch outside what a device runs")
            written = _written_params(kernel)
            launch_args, fmt = [], ""
            for i, v in enumerate(op.kernel_args):
                kind, x = operand(v)
                if isinstance(v.type, MemRefType):
                    if kind != "slot":
                        raise NotSchedulable("a kernel argument that is not a device buffer")
                    launch_args.append(("slot", x))
                    fmt += "P" + "q" * v.type.rank
                    if i in written:
                        written_slots.add(_root(sched, x))
                else:
                    if kind != "const":
                        raise NotSchedulable("a kernel scalar computed at run time")
                    value, f = _scalar(x, v.type)
                    launch_args.append(("scalar", value))
                    fmt += f
            stream, waits = place(deps) if op.results else (SYNC, ())
            token = new_token(op, stream) if op.results else None
            sched.steps.append(Launch(op.module_name, op.kernel_name, sizes[:3], sizes[3:], tuple(launch_args), fmt,
                                      waits, token, stream))
        elif n == "gpu.wait":
            deps = token_deps(op) if op.operands else ()
            if op.results:
                stream, waits = place(deps)
                token = new_token(op, stream)
                sched.steps.append(Join(waits, token, stream))
            # A host wait: the host reads nothing before it returns, where the final wait is.
        elif n == "gpu.dealloc":
            if op.results or len(op.operands) != 1:
                raise NotSchedulable("an asynchronous gpu.dealloc")
            sched.frees.append(operand(op.operands[0])[1])
        elif n == "memref.dealloc":
            pass  # a host buffer: the call's arrays are Python's to free
        elif n == "bufferization.to_tensor":
            values[op.results[0]] = operand(op.operands[0])
        elif n == "func.return":
            for v in op.operands:
                kind, x = operand(v)
                if kind == "const":
                    sched.results.append(Result(value=x))
                elif kind == "tensor":
                    sched.results.append(Result(param=x))
                elif kind == "slot" and sched.slots[x].kind == "host":
                    sched.results.append(_result(sched, x, copies_into.get(x, [])))
                else:
                    raise NotSchedulable("a returned value that is not a host buffer")
        else:
            raise NotSchedulable(f"the host op '{n}'")
    for s, copies in copies_into.items():
        slot_info = sched.slots[s]
        if slot_info.kind == "device" and s not in written_slots and len(copies) == 1 \
                and sched.slots[copies[0][1]].kind == "arg":
            slot_info.borrowable = True
            slot_info.param = sched.slots[copies[0][1]].param
    sched.joins_needing_events = frozenset(waited_elsewhere)
    sched.streams = tuple(sorted({s.stream for s in sched.steps if hasattr(s, "stream")}))
    return sched


def _runnable(sizes: tuple) -> bool:
    from irc.dialects.gpu import MAX_BLOCK, MAX_GRID, MAX_THREADS_PER_BLOCK

    grid, block = sizes[:3], sizes[3:]
    return all(1 <= n <= limit for n, limit in zip(grid + block, MAX_GRID + MAX_BLOCK)) \
        and block[0] * block[1] * block[2] <= MAX_THREADS_PER_BLOCK


def _root(sched: Schedule, s: int) -> int:
    while sched.slots[s].kind == "view":
        s = sched.slots[s].base
    return s


def _result(sched: Schedule, host: int, copies: list) -> Result:
    if len(copies) == 1:
        step, src = copies[0]
        if sched.slots[src].kind == "device" and sched.slots[src].nbytes == sched.slots[host].nbytes:
            return Result(slot=host, device_slot=src, copy_step=step)
    return Result(slot=host)

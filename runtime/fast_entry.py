"""One specialisation's call as a generated Python function: the least a call can do.

``irc.jit`` keys its cache on the arguments' shapes and dtypes, so once a key matches there is
nothing left to check but that each argument is exactly an ``np.ndarray`` and what only the
buffers can say (C-contiguous, aligned and writeable; the call otherwise goes the full way,
which copies or explains).  The generated function makes the outputs and makes one C call: through
``cpu/array_call.py``'s trampoline, which takes the arrays themselves, reads their addresses and
flags in machine code and has the sizes in a constant block::

    def _entry(a0, a1):
        if _target.generation != _generation or type(a0) is not _nd or a0.dtype is not _in0 or ...:
            return _full(a0, a1)
        o0 = _empty(_shape0, _dtype0)
        status = _t(_block, a0, a1, o0)
        if status == _REFUSED: return _full(a0, a1)
        if status: _fault(status)
        return o0

with an arena from the specialisation's free list where it has temporaries.  Where numpy's array
struct was not found (``array_call.layout``), the entry takes each array's address
(``ctypes.c_char.from_buffer``, which refuses arrays that are not C-contiguous and writeable, but
not misaligned ones) and passes the sizes as constants, the way the scalar wrappers of
``cpu/callconv.py`` are generated.

``TensorFunction.__call__`` (``exe.f(...)``) calls the same function once it has found the
specialisation for the arguments' shapes (the function checks their types and dtypes itself,
against constants, first), when no ``out=`` is given.  Measured on the Intel Xeon (session 14),
an irc.jit call of four 4-element arrays: 5.1-5.2 us with addresses taken, 2.7 with the
trampoline (both entries in one process, interleaved); ``python benchmarks/frontend.py --only
overhead``, three runs of each commit in turn: irc.jit 5.4-5.5 -> 2.7-4.6 us, ``exe.f`` 5.2-5.4 ->
4.3-4.5.
With ``out=`` a second generated function takes the outputs too and checks them against
constants (type, dtype, shape); its trampoline refuses an output that overlaps an input or an
earlier output (by address and bytes).  An 8x8 matmul with ``out=``: 7.7 -> 4.6-5.1 us a call
(session 13, its own entry taking addresses), then 7.5 -> 4.0 us (medians; fastest 5.2 -> 2.8)
with the trampoline (session 14, both entries in one process, interleaved; torch's
``matmul(out=)`` took 1.1 us in session 13).

Since session 15 the trampoline is a builtin function object that Python calls without ctypes
(0.28 us where the ctypes call took 1.4), ``TensorFunction.__call__`` calls the entry itself, and
``exe.f`` is an instance attribute: ``python benchmarks/frontend.py --only overhead``, the
session's start and this code in turn, two runs each: irc.jit 2.75 -> 1.57 us, ``exe.f`` 2.64-2.71
-> 1.35-1.37, ``exe.f(..., out=o)`` 2.92-2.95 -> 1.52-1.59 (the Intel Xeon; an 8x8 matmul in one
process, 25 rounds interleaved: ``out=`` 3.61 -> 1.70 us, torch's ``matmul(out=)`` 1.25;
allocating 3.36 -> 1.55, torch 1.52).  Then ``__call__`` tries the entry of its latest fast call
first (made with ``elsewhere``: it checks the inputs' shapes itself), with no shapes key and no
lookup: ``exe.f`` 1.38-1.41 -> 0.97-1.18 us, ``out=`` 1.54-2.66 -> 1.12-1.14 (frontend.py, two
runs each in turn); the 8x8 matmul ``out=`` 1.64 -> 1.28 (torch 1.28-1.32), allocating 1.54 ->
1.21 (torch 1.54-1.56).
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from . import output_pool
from .cpu import array_call
from .cpu import target_cpu as _target_cpu


def _at(a) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(a))


def make_entry(function, spec, shapes: tuple, name: str, refused=None, given_outputs: bool = False,
               typed: bool = False, elsewhere=None):
    """The call of ``spec`` (a ``Specialization`` of the ``TensorFunction`` ``function``) for
    arguments that the caller has checked are of exactly ``shapes`` (unless ``elsewhere`` is
    given: then the call checks them, below); an argument that is not an
    ``np.ndarray`` of the signature's dtype, and anything the buffers refuse, goes to
    ``refused`` (by default ``function`` itself; ``function``'s own fast path passes its full
    checks, which do not come back here).  ``typed``: the caller has checked the dtypes (irc.jit's
    cache key), so the call checks only that each argument is exactly an ``np.ndarray`` (whose
    struct ``array_call``'s trampoline reads).  None where the function takes sizes from
    scalars.  A call is one C call, on threads or not (its parallel loops reach the thread pool
    from machine code: cpu/pool.py).

    With ``given_outputs`` the call takes the outputs as well (``out=``: one array, or a tuple)
    and checks what the caller has not: that they are exact arrays of the right dtypes and
    shapes, writeable and C-contiguous, and that none overlaps another or an input; anything
    else (an in-place pair among them) goes to ``refused(arrays, out)``.

    With ``elsewhere`` the call checks the inputs' shapes too, and hands arrays of other shapes
    (after the type checks: exact arrays of the signature's dtypes), and any call once
    ``set_cpu`` has changed the target, to ``elsewhere`` (called as ``refused`` is): the call
    ``TensorFunction.__call__`` makes first, whatever the shapes, without looking them up."""
    if function._fast_dtypes is None:
        return None
    params = [f"a{i}" for i in range(len(shapes))]
    outs = [f"o{k}" for k in range(len(spec.out_shapes))]
    env = {"_empty": output_pool.empty, "_np_empty": np.empty, "_at": _at, "_full": refused or function,
           "_refused": (TypeError, ValueError, BufferError), "_nd": np.ndarray,
           # The entry keeps the machine code it calls (irc.jit's cache holds entries, not
           # specialisations; the executable, not the specialisation, which holds the entry), and
           # refuses once ``set_cpu`` has changed the target (the function specialises again).
           "_keep": spec.executable, "_target": _target_cpu, "_generation": _target_cpu.generation}
    # the arguments' types and dtypes (the caller's fast path leaves them to this call)
    for i, dtype in enumerate(function._fast_dtypes):
        env[f"_in{i}"] = dtype
    type_checks = " or ".join(([] if elsewhere else ["_target.generation != _generation"])
                              + [f"type(a{i}) is not _nd" + ("" if typed else f" or a{i}.dtype is not _in{i}")
                                 for i in range(len(params))])
    inputs = "(" + "".join(f"{p}, " for p in params) + ")"  # a tuple of them ("()": no inputs)
    given = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ",)"  # out=, once read (a generator: once)
    moved = []  # with ``elsewhere``: the lines that hand other shapes (and another target) to it
    if elsewhere is not None:
        env["_elsewhere"] = elsewhere
        call = f"_elsewhere({inputs}, out)" if given_outputs else f"_elsewhere({', '.join(params)})"
        for i, shape in enumerate(shapes):  # plain ints: compared with exact arrays' shapes below
            env[f"_ishape{i}"] = tuple(int(n) for n in shape)
        if params:  # after the type checks: every input is an array, with a shape to compare
            moved = [f"    if {' or '.join(f'a{i}.shape != _ishape{i}' for i in range(len(params)))}:",
                     f"        return _elsewhere({inputs}, {given})" if given_outputs else f"        return {call}"]
    if given_outputs:
        lines = [f"def _entry({', '.join(params + ['out'])}):"]
        if elsewhere is not None:
            lines += ["    if _target.generation != _generation:", f"        return {call}"]
        if len(outs) == 1:
            lines += [f"    {given} = out"]
        else:  # a tuple or list of them (an array would unpack into its rows: the checks refuse it)
            lines += ["    if type(out) is _nd:", f"        return _full({inputs}, out)", "    try:",
                      f"        {given} = out", "    except (TypeError, ValueError):",
                      f"        return _full({inputs}, out)"]
        checks = " or ".join(f"type(o{k}) is not _nd or o{k}.dtype is not _dtype{k} or o{k}.shape != _shape{k}"
                             for k in range(len(outs)))
        if moved:  # the inputs first: arrays of other shapes (and their outputs) go elsewhere
            lines += [f"    if {type_checks}:", f"        return _full({inputs}, {given})", *moved,
                      f"    if {checks}:", f"        return _full({inputs}, {given})"]
        else:
            lines += [f"    if {' or '.join(filter(None, [type_checks, checks]))}:", f"        return _full({inputs}, out)"]
    else:
        lines = [f"def _entry({', '.join(params)}):"]
        if elsewhere is not None:
            lines += ["    if _target.generation != _generation:", f"        return {call}"]
        if type_checks:
            lines += [f"    if {type_checks}:", f"        return _full({', '.join(params)})"]
        lines += moved
    for k, (shape, dtype) in enumerate(zip(spec.out_shapes, function._out_dtypes)):
        env[f"_shape{k}"], env[f"_dtype{k}"] = tuple(shape), dtype
        if given_outputs:
            continue
        # an output too small for the pool is numpy's own, without the pool's size arithmetic
        small = np.dtype(dtype).itemsize * math.prod(shape) < output_pool.MIN_BYTES
        lines.append(f"    o{k} = {'_np_empty' if small else '_empty'}(_shape{k}, _dtype{k})")
    arrays = params + outs
    all_shapes, dtypes = list(shapes) + list(spec.out_shapes), list(function._fast_dtypes) + list(function._out_dtypes)
    # out=: no output may overlap an input or an output before it (an in-place pair goes to ``refused``)
    disjoint = [(len(params) + j, v) for j in range(len(outs)) for v in range(len(params) + j)] if given_outputs else []
    sizes = [np.dtype(dt).itemsize * math.prod(shape) for dt, shape in zip(dtypes, all_shapes)]  # bytes
    trampoline, constants = _trampoline(spec, all_shapes, sizes, disjoint) or (None, None)
    refuse = f"_full({inputs}, out)" if given_outputs else f"_full({', '.join(params)})"
    if given_outputs and trampoline is None:  # addresses first, then the overlap test on them (sizes are constants)
        lines += ["    try:", f"        {', '.join('p_' + v for v in arrays)}, = {', '.join(f'_at({v})' for v in arrays)},",
                  "    except _refused:", f"        return {refuse}"]
        pairs = [(o, v) for j, o in enumerate(outs) for v in params + outs[:j]]
        size = dict(zip(arrays, sizes))
        if pairs:
            overlap = " or ".join(f"(p_{o} < p_{v} + {size[v]} and p_{v} < p_{o} + {size[o]})" for o, v in pairs)
            lines += [f"    if {overlap}:", f"        return {refuse}"]
        c_args = [x for v, shape in zip(arrays, all_shapes) for x in (f"p_{v}", *(str(int(n)) for n in shape))]
    elif trampoline is None:
        c_args = [x for v, shape in zip(arrays, all_shapes) for x in (f"_at({v})", *(str(int(n)) for n in shape))]
    if spec.arena_bytes is not None:
        # An arena per concurrent call, from the specialisation's free list of (arena, address)
        # pairs for these entries (an address taken once: 0.4 us a call).
        env["_arenas"], env["_new_arena"], env["_nbytes"] = spec.arena_pairs, _arena_pair, spec.arena_bytes
        if trampoline is None:
            c_args += ["arena[1]", str(int(spec.arena_bytes))]
        lines += ["    try:", "        arena = _arenas.pop()", "    except IndexError:",  # another thread took the last
                  "        arena = _new_arena(_nbytes)", "    try:"]
    indent = "    " if spec.arena_bytes is None else "        "
    if trampoline is not None:  # the arrays themselves: the trampoline reads their addresses
        objects = arrays + (["arena[0]"] if spec.arena_bytes is not None else [])
        env["_t"], env["_block"], env["_REFUSED"] = trampoline, constants, array_call.REFUSED
        lines += [f"{indent}status = _t(_block, {', '.join(objects)})", f"{indent}if status == _REFUSED: return {refuse}"]
    elif given_outputs:
        lines += [f"{indent}args = ({', '.join(c_args)},)", f"{indent}status = _c(*args)"]
    else:
        lines += [f"{indent}try:", f"{indent}    args = ({', '.join(c_args)},)", f"{indent}except _refused:",
                  f"{indent}    return {refuse}", f"{indent}status = _c(*args)"]
    env["_c"], env["_fault"] = spec.c_function, spec.wrapper.raise_fault
    lines += [f"{indent}if status: _fault(status)"]
    if spec.arena_bytes is not None:
        lines += ["    finally:", "        _arenas.append(arena)"]
    lines.append(f"    return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ',)' if outs else 'None'}")
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<irc entry for @{name} {list(shapes)}>", "exec"), env)  # noqa: S102 - generated above
    return env.pop("_entry")  # not left in its own globals: a cycle would keep ``_keep`` until a collection


def _trampoline(spec, shapes: list, sizes: list, disjoint: list = ()):
    """(``array_call``'s trampoline for ``spec``'s C function, its constant block) for arrays of
    ``shapes`` and ``sizes`` bytes (the inputs', then the outputs') and the arena, the pairs of
    ``disjoint`` refused where they overlap; None where there is none."""
    arguments, arrays = [], []
    for shape in shapes + ([(spec.arena_bytes,)] if spec.arena_bytes is not None else []):
        arrays.append(len(arguments))
        arguments += [0, *(int(n) for n in shape)]
    if len(arguments) != len(spec.c_function.argtypes):
        return None
    trampoline = array_call.trampoline(len(arguments), tuple(arrays), tuple(disjoint))
    if trampoline is None:
        return None
    address = ctypes.cast(spec.c_function, ctypes.c_void_p).value
    return trampoline, array_call.block(address, arguments, sizes if disjoint else [])


def _arena_pair(nbytes: int) -> tuple:
    """A new arena of ``nbytes`` and its address (``from_buffer`` wants at least one byte)."""
    from .tensor_function import _aligned_arena

    arena = _aligned_arena(nbytes)
    return arena, (_at(arena) if arena.nbytes else arena.ctypes.data)

"""Loops for ``graph.conv2d`` and ``graph.conv2d_weight_grad``: im2col into a scratch matrix,
then products: calls of the GEMM library (gemm_library.py) for f32/f64 where the pipeline uses it,
the inline GEMM of matmul.py otherwise.

For each image n, the output O x (Ho*Wo) is W (O x C*KH*KW) times the matrix
whose row ``(c, kh, kw)`` holds the input pixels that kernel tap sees at every
output position (zero where the tap falls in the padding).  The zeros are the
same for every image, so the scratch is cleared once and each image only
copies the in-bounds runs: for each tap, the output rows and columns whose
input lies inside the image are computed (a division by the stride), and the
copy loops run over exactly those.  A 1x1 convolution with stride 1 and no
padding needs no copy: the image itself is the matrix.

The products accumulate as the GEMM does (k = (c, kh, kw) in order, in the
element type), so floats agree with the interpreter (numpy's tensordot) to a
tolerance scaled by C*KH*KW; integers exactly.
"""

from __future__ import annotations

import contextlib

from irc.builder import Builder
from irc.types import FloatType, MemRefType

from . import lowering
from .gemm_library import THREAD_MIN_WORK, Blocking, LibraryGemm, split_columns, thread_parts
from .matmul import Gemm
from .movement import fill


def _library(ctx, elem) -> bool:
    """Whether the products go to the GEMM library (lowering/gemm_library.py), as a large
    matmul's do: f32/f64 under ``gemm-library``.  Its kernel packs A (the weight, read once per
    image in place by the inline kernel: rows C*KH*KW apart) and reads B (the im2col matrix) in
    place when the weight has few rows, where the inline GEMM packs B every time."""
    return bool(ctx.options.get("gemm_library")) and isinstance(elem, FloatType) and elem.kind in ("f32", "f64")


@lowering("graph.conv2d")
def lower_conv2d(ctx, op, inputs, output) -> None:
    lb = ctx.lb
    x, w = inputs
    n, c, h, wd = x.type.shape
    o, _, kh, kw = w.type.shape
    _, _, ho, wo = output.type.shape
    stride, padding = _window(op)
    if n * o * ho * wo == 0:
        return
    elem = output.type.element_type
    depth, positions = c * kh * kw, ho * wo
    fx, fw, fout = lb.flat(x), lb.flat(w), lb.flat(output)
    direct = kh == kw == 1 and stride == [1, 1] and padding == [0, 0]
    library = _library(ctx, elem) and depth
    parts = _parts(ctx, n, o * positions * depth) if library else 1
    size = depth * positions
    cols = None if direct else ctx.temporary(MemRefType([size * parts], x.type.element_type))
    if cols is not None and depth:
        fill(lb, cols, lb.const(0, x.type.element_type))
    if library:
        gemm = LibraryGemm(ctx, elem, o, positions, depth, parts)
        weight = gemm.matrix(fw, o, depth)

        def images(part, first, last) -> None:
            own = lb.index(part) * size
            with lb.for_(first, last) as image:
                if direct:
                    source = gemm.matrix(fx, depth, positions, image.iv * (c * h * wd))
                else:
                    _im2col(lb, fx, image.iv, cols, (c, h, wd), (kh, kw), (ho, wo), stride, padding, own)
                    source = gemm.matrix(cols, depth, positions, own)
                gemm.call(weight, source, gemm.matrix(fout, o, positions, image.iv * (o * positions)), part=part)

        _split(lb, n, parts, images, n * o * positions * depth)
        return
    gemm = Gemm(ctx, elem, o, positions, depth)
    with lb.for_(0, n) as image:
        if direct:
            gemm.emit(fw, lb.index(0), fx, image.iv * (c * h * wd), fout, image.iv * (o * positions))
        else:
            if depth:
                _im2col(lb, fx, image.iv, cols, (c, h, wd), (kh, kw), (ho, wo), stride, padding)
            gemm.emit(fw, lb.index(0), cols, lb.index(0), fout, image.iv * (o * positions))


@lowering("graph.conv2d_weight_grad")
def lower_conv2d_weight_grad(ctx, op, inputs, output) -> None:
    """``dw (O x C*KH*KW) = sum over images of g[n] (O x Ho*Wo) @ cols[n]^T``, cols[n] the forward's
    im2col matrix of image n (C*KH*KW x Ho*Wo): the product reads it as B^T."""
    lb = ctx.lb
    x, g = inputs
    n, c, h, wd = x.type.shape
    o, _, kh, kw = output.type.shape
    ho, wo = g.type.shape[2:]
    stride, padding = _window(op)
    elem = output.type.element_type
    depth, positions = c * kh * kw, ho * wo
    fx, fg, fout = lb.flat(x), lb.flat(g), lb.flat(output)
    if o * depth == 0:
        return
    if n * positions == 0:
        fill(lb, fout, lb.const(0, elem))
        return
    cols = ctx.temporary(MemRefType([depth * positions], elem))
    fill(lb, cols, lb.const(0, elem))
    if _library(ctx, elem):
        # Threads split dW's columns (the taps), never the images: parts summing their images
        # apart would change the order of the sums with the number of threads (results are
        # those of one thread whatever the threads).  Each part writes its own taps' rows of
        # the im2col matrix and computes its own columns of dW, every image in order.
        blocking = Blocking.for_host(elem, ctx.options)
        parts = thread_parts(ctx.options, blocking.nr, o, depth, n * positions)  # a product of K = N*Ho*Wo
        gemm = LibraryGemm(ctx, elem, o, depth, positions, parts)
        source, result = gemm.matrix(cols, depth, positions), gemm.matrix(fout, o, depth)

        def taps(part, first, last) -> None:
            with lb.for_(0, n) as image:
                _im2col(lb, fx, image.iv, cols, (c, h, wd), (kh, kw), (ho, wo), stride, padding, taps=(first, last))
                grads = gemm.matrix(fg, o, positions, image.iv * (o * positions))
                gemm.call(grads, source, result, (False, True), add_d=lb.compare("ne", image.iv, lb.index(0)),
                          part=part, cols=(first, last))

        split_columns(lb, blocking.nr, depth, parts, taps)
        return
    fill(lb, fout, lb.const(0, elem))
    gemm = Gemm(ctx, elem, o, depth, positions, (False, True), accumulate=True)
    with lb.for_(0, n) as image:
        _im2col(lb, fx, image.iv, cols, (c, h, wd), (kh, kw), (ho, wo), stride, padding)
        gemm.emit(fg, image.iv * (o * positions), cols, lb.index(0), fout, lb.index(0))


def _parts(ctx, images: int, work_per_image: int) -> int:
    """Parts the images are split into, each on a thread with its own scratch (``threads`` of
    tensor-to-loops; as a large matmul is split: gemm_library.THREAD_MIN_WORK multiply-adds each)."""
    return max(1, min(ctx.options.get("threads", 1), images, images * work_per_image // THREAD_MIN_WORK))


def _split(lb: Builder, n: int, parts: int, images, work: int) -> None:
    """``images(part, first, last)`` for ``parts`` blocks of the ``n`` images: one call, or the
    iterations of a ``parallel`` loop (split-parallel runs them on threads).  The loop says its
    ``work`` (multiply-adds): split-parallel's estimate cannot count the images of a part, a
    loop whose bounds it does not know."""
    if parts == 1:
        images(0, 0, n)
        return
    with lb.for_(0, parts, parallel=True, work=work) as t:
        first = lb.op("arith.divui", t.iv * n, lb.index(parts))
        last = lb.op("arith.divui", (t.iv + 1) * n, lb.index(parts))
        images(t.iv, first, last)


def _window(op) -> tuple[list[int], list[int]]:
    attrs = op.attributes
    stride = [e.value for e in attrs["stride"].elements] if "stride" in attrs else [1, 1]
    padding = [e.value for e in attrs["padding"].elements] if "padding" in attrs else [0, 0]
    return stride, padding


def _im2col(lb: Builder, x, image, cols, chw, kernel, out_hw, stride, padding, offset=0, taps=None) -> None:
    """cols[offset + ((ci*KH + i)*KW + j) * Ho*Wo + oh*Wo + ow] = x[image, ci, oh*sh + i - ph, ow*sw + j - pw]
    for every in-bounds input position (the rest stay zero); ``taps`` = (first, last): only the
    rows of those taps ((ci*KH + i)*KW + j)."""
    c = chw[0]
    kh, kw = kernel
    with contextlib.ExitStack() as loops:
        if taps is None:
            ci, i, j = (loops.enter_context(lb.for_(0, size)).iv for size in (c, kh, kw))
            tap = (ci * kh + i) * kw + j
        else:
            tap = loops.enter_context(lb.for_(*taps)).iv
            ci = lb.op("arith.divui", tap, lb.index(kh * kw))
            within = lb.op("arith.remui", tap, lb.index(kh * kw))
            i, j = lb.op("arith.divui", within, lb.index(kw)), lb.op("arith.remui", within, lb.index(kw))
        _im2col_tap(lb, x, image, cols, chw, out_hw, stride, padding, offset, tap, ci, i, j)


def _im2col_tap(lb: Builder, x, image, cols, chw, out_hw, stride, padding, offset, tap, ci, i, j) -> None:
    """``_im2col``'s row of one tap (input channel ``ci``, kernel position ``i``, ``j``)."""
    c, h, wd = chw
    ho, wo = out_hw
    (sh, sw), (ph, pw) = stride, padding
    oh_lo, oh_hi = _valid_range(lb, i, sh, ph, h, ho)
    ow_lo, ow_hi = _valid_range(lb, j, sw, pw, wd, wo)
    plane = (image * c + ci) * (h * wd)
    shift_h = lb.op("arith.subi", i, lb.index(ph))
    shift_w = lb.op("arith.subi", j, lb.index(pw))
    with lb.for_(oh_lo, oh_hi) as oh:
        src_row = plane + (oh.iv * sh + shift_h) * wd
        dst_row = offset + tap * (ho * wo) + oh.iv * wo
        with lb.for_(ow_lo, ow_hi) as ow:
            value = lb.load(x, [src_row + (ow.iv * sw + shift_w)])
            lb.store(value, cols, [dst_row + ow.iv])


def _valid_range(lb: Builder, tap, stride: int, pad: int, size: int, out: int):
    """The output positions p in [lo, hi) whose input p*stride + tap - pad lies in [0, size)."""
    first = lb.op("arith.ceildivsi", lb.op("arith.subi", lb.index(pad), tap), lb.index(stride))
    last = lb.op("arith.floordivsi", lb.op("arith.subi", lb.index(size - 1 + pad), tap), lb.index(stride))
    lo = lb.op("arith.maxsi", first, lb.index(0))
    hi = lb.op("arith.minsi", last + 1, lb.index(out))
    return lo, hi

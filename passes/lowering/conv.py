"""Loops for ``graph.conv2d``: im2col into a scratch matrix, then the GEMM of matmul.py.

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

from irc.builder import Builder
from irc.types import MemRefType

from . import lowering
from .matmul import Gemm
from .movement import fill


@lowering("graph.conv2d")
def lower_conv2d(ctx, op, inputs, output) -> None:
    lb = ctx.lb
    x, w = inputs
    n, c, h, wd = x.type.shape
    o, _, kh, kw = w.type.shape
    _, _, ho, wo = output.type.shape
    stride = [e.value for e in op.attributes["stride"].elements] if "stride" in op.attributes else [1, 1]
    padding = [e.value for e in op.attributes["padding"].elements] if "padding" in op.attributes else [0, 0]
    if n * o * ho * wo == 0:
        return
    depth, positions = c * kh * kw, ho * wo
    gemm = Gemm(ctx, output.type.element_type, o, positions, depth)
    fx, fw, fout = lb.flat(x), lb.flat(w), lb.flat(output)
    direct = kh == kw == 1 and stride == [1, 1] and padding == [0, 0]
    if direct:
        with lb.for_(0, n) as image:
            gemm.emit(fw, lb.index(0), fx, image.iv * (c * h * wd), fout, image.iv * (o * positions))
        return
    cols = ctx.temporary(MemRefType([depth * positions], x.type.element_type))
    if depth:
        fill(lb, cols, lb.const(0, x.type.element_type))
    with lb.for_(0, n) as image:
        if depth:
            _im2col(lb, fx, image.iv, cols, (c, h, wd), (kh, kw), (ho, wo), stride, padding)
        gemm.emit(fw, lb.index(0), cols, lb.index(0), fout, image.iv * (o * positions))


def _im2col(lb: Builder, x, image, cols, chw, kernel, out_hw, stride, padding) -> None:
    """cols[((ci*KH + i)*KW + j) * Ho*Wo + oh*Wo + ow] = x[image, ci, oh*sh + i - ph, ow*sw + j - pw]
    for every in-bounds input position (the rest stay zero)."""
    c, h, wd = chw
    kh, kw = kernel
    ho, wo = out_hw
    (sh, sw), (ph, pw) = stride, padding
    with lb.for_(0, c) as ci, lb.for_(0, kh) as i, lb.for_(0, kw) as j:
        tap = (ci.iv * kh + i.iv) * kw + j.iv
        oh_lo, oh_hi = _valid_range(lb, i.iv, sh, ph, h, ho)
        ow_lo, ow_hi = _valid_range(lb, j.iv, sw, pw, wd, wo)
        plane = (image * c + ci.iv) * (h * wd)
        shift_h = lb.op("arith.subi", i.iv, lb.index(ph))
        shift_w = lb.op("arith.subi", j.iv, lb.index(pw))
        with lb.for_(oh_lo, oh_hi) as oh:
            src_row = plane + (oh.iv * sh + shift_h) * wd
            dst_row = tap * (ho * wo) + oh.iv * wo
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

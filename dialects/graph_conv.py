"""``graph.conv2d_weight_grad``: the gradient of ``graph.conv2d`` with respect to its weight.

As a convolution (of the input with the cotangent as the kernel, batch and channels swapped)
it is a product of O rows by KH*KW columns with a depth of N*Ho*Wo per input channel: a GEMM
nine columns wide for a 3x3 kernel, which no register tile fills, after transposing both
operands.  As its own op it lowers to the forward convolution's im2col and one product per
image, ``g[n] (O x Ho*Wo) @ cols[n]^T (Ho*Wo x C*KH*KW)``, accumulated over the images
(lowering/conv.py): the shape the forward pass has, read the same way.
"""

from __future__ import annotations

import numpy as np

from irc.semantics import Fault

from .graph import (
    Conv2DOp,
    NaryOp,
    ShapeError,
    _check_element,
    _conv_out,
    _dims,
    _finish,
    _int_list,
    _same_element,
    _tensor,
)
from .tensor_grad import conv2d_input_grad, fit


class Conv2DWeightGradOp(NaryOp):
    """``graph.conv2d_weight_grad %x, %g {kernel = [3, 3], stride = [1, 1], padding = [1, 1]} :
    (NCHW, NOHoWo) -> OCKHKW``.

    The cotangent of the weight of ``%y = graph.conv2d %x, %w {stride, padding}`` for the
    cotangent ``%g`` of ``%y``, where ``%w`` is O x C x ``kernel``:
    ``dw[o, c, i, j] = sum over n, p, q of g[n, o, p, q] * xpad[n, c, p*sh + i, q*sw + j]``.
    ``%g``'s spatial sizes must be the convolution's output sizes for that kernel.
    """

    name = "graph.conv2d_weight_grad"
    summary = "Gradient of graph.conv2d with respect to its weight (the input and the output's cotangent)."
    example = ("%r = graph.conv2d_weight_grad %img, %img {kernel = [3, 3], stride = [1, 1], padding = [1, 1]} : "
               "(tensor<1x3x8x8xf32>, tensor<1x3x8x8xf32>) -> tensor<3x3x3x3xf32>")

    @classmethod
    def infer_type(cls, types, attrs, declared):
        if len(types) != 2:
            raise ShapeError(f"takes an input and a cotangent, got {len(types)} operands")
        x, g = _tensor(types[0], "input"), _tensor(types[1], "cotangent")
        if x.rank != 4 or g.rank != 4:
            raise ShapeError(f"input (NCHW) and cotangent (NOHW) must be rank-4 tensors, got {x} and {g}")
        _same_element([x, g])
        _check_element(x, "number")
        kernel = _int_list(attrs, "kernel", 2)
        if min(kernel) < 1:
            raise ShapeError(f"kernel must be at least 1x1, got {list(kernel)}")
        stride, padding = Conv2DOp.window(attrs)
        want = [_conv_out(n, k, s, p, what) for n, k, s, p, what
                in zip(x.shape[2:], kernel, stride, padding, ("height", "width"))]
        if x.shape[0] is not None and g.shape[0] is not None and x.shape[0] != g.shape[0]:
            raise ShapeError(f"input and cotangent have different batch sizes: {x} and {g}")
        if any(w is not None and d is not None and w != d for w, d in zip(want, g.shape[2:])):
            raise ShapeError(f"the cotangent's spatial sizes {_dims(g.shape[2:])} are not the convolution's output "
                             f"sizes {_dims(want)}")
        return x.with_shape([g.shape[1], x.shape[1], *kernel])

    def compute(self, args):
        x, g = args
        (sh, sw), (ph, pw) = Conv2DOp.window(self.attributes)
        kh, kw = _int_list(self.attributes, "kernel", 2)
        ho, wo = g.shape[2:]
        if x.shape[0] != g.shape[0] or (x.shape[2] + 2 * ph - kh) // sh + 1 != ho \
                or (x.shape[3] + 2 * pw - kw) // sw + 1 != wo:
            raise Fault(f"the cotangent {_dims(g.shape)} does not fit the input {_dims(x.shape)} and the kernel")
        padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))
        windows = windows[:, :, ::sh, ::sw][:, :, :ho, :wo]  # N, C, Ho, Wo, KH, KW
        out = np.tensordot(g, windows, axes=([0, 2, 3], [0, 2, 3]))  # O, C, KH, KW
        return _finish(np.asarray(out, order="C"), self.results[0].type.element_type)

    def _forward(self, b, x, w):
        stride, padding = Conv2DOp.window(self.attributes)
        return b.built(Conv2DOp.build(x.value, w.value, stride, padding))

    def vjp(self, b, x, y, g):
        # Bilinear: dw(x, g) is the adjoint of w -> conv2d(x, w) applied to g, and (for a fixed g)
        # the adjoint in x of the convolution's input gradient.
        stride, padding = Conv2DOp.window(self.attributes)
        dx = conv2d_input_grad(b, stride, padding, x[0], g[0], x[1])
        return [dx, fit(b, self._forward(b, x[0], g[0]), x[1])]

    def jvp(self, b, x, y, t):
        terms = []
        for k, tangent in enumerate(t):
            if tangent is None:
                continue
            operands = [tangent, x[1]] if k == 0 else [x[0], tangent]
            terms.append(b.tensor_op(self.name, *operands, **{n: self.attributes[n] for n in self.attributes}))
        if not terms:
            return [None]
        terms = [fit(b, term, y[0]) for term in terms]
        return [terms[0] + terms[1] if len(terms) == 2 else terms[0]]

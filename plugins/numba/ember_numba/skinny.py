"""Skinny products: ``W (O, K) @ X (K, P)`` for few output columns (P <= :data:`MAX_P`), float32.

Where P is small (ResNet-50's last stage at batch 1: P = 49) OpenBLAS lost to onnxruntime on
one thread by 1.65-1.8x: it copies ("packs") the weight matrix into its kernel's layout on
every call, and the weights are the large operand (the last two stages hold ~90% of the
model's 102 MB); onnxruntime packs them once, when its session starts. This product packs
nothing: it reads the weights where they are, row-major, each once, and X in place too.
Nothing is kept between calls, so there is no packed copy that could go stale when the
weights change (a training step, ``load_state_dict``, an in-place update): correct by
construction, where a cache would need a proof that the array did not change.

The microkernel (:func:`_tile`, explicit LLVM vector IR as ``fused/pooling.py``'s) makes a tile
of RO rows by RV vectors of 16 columns of the output, its RO*RV accumulators in registers:

=============  ===================================================================
each k step    RO scalar weights ``W[o, k]`` broadcast; RV loads of ``X[k, p:p+16]``;
               RO*RV fused multiply-adds ``acc[r][v] += W[o+r, k] * X[k, p+16v : +16]``
tile shapes    12 x 1 (one vector), 8 x 2 (so 2, 4, ... vectors), 8 x 3 (3 vectors: P =
               48-50); at most 24 of the 32 vector registers hold accumulators, the rest
               the broadcasts and the loads of X, so that nothing spills where LLVM loads
               two k steps' broadcasts ahead (:func:`_rows_block`); a block's last tile moves
               back to end at the block's end (1 x RV tiles only for blocks of fewer rows
               than a tile)
order          per tile all K steps at once: its weight rows are read front to back (from
               memory, once: the hardware prefetcher follows them; blocks of 128 k, which
               jump between rows, ran 1.5x slower on K = 4608), then stay in cache for the
               tile's other columns
last columns   one or two past the last whole vector (P = 49: 3 vectors and 1) as dot
               products of the weight rows, 16 k at a time (:func:`_dots`), not a vector
               that would be 15/16 padding; more, or K not a multiple of 16: X is padded
threads        blocks of output rows, two a thread, taken on demand (:func:`blas.on_demand`)
=============  ===================================================================

Each output is one fixed chain of fused multiply-adds (the last columns: 16 chains and a
fixed tree of adds), whatever the threads: the bits do not depend on the thread count, so
the jit's rewrites, which must give their nodes' bits, use it wherever the plain ``matmul``
does (:func:`takes`: one rule for blas.matmul, the 1x1 rewrite and batch-1 convolutions).

>>> w = np.arange(12, dtype=np.float32).reshape(3, 4)
>>> x = np.ones((4, 5), np.float32)
>>> matmul(w, x).tolist()[0]
[6.0, 6.0, 6.0, 6.0, 6.0]
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types, uint64
from numba.core.errors import TypingError
from numba.extending import intrinsic

from . import blas  # blas.matmul calls this module: its on_demand is read at call time
from .kernels import JIT

#: Lanes of one vector (float32 on AVX-512: 16).
LANES = 16
#: Output columns at most: up to 4 vectors it pays (P = 49: 0.56-0.70x OpenBLAS's time on one
#: thread); at P = 196 it lost (0.95-1.64x: X, re-read for every tile, outgrows the L2 cache).
MAX_P = 64
#: Weights of at least this many bytes (1 MB): where OpenBLAS's repacking was measured to cost.
MIN_WEIGHT_BYTES = 1 << 20
#: Columns past the last whole vector computed as dot products (more: padded to a vector).
MAX_TAIL = 2
#: Blocks of output rows per thread, their edges multiples of the tiles' 12 and 8 rows.
BLOCKS_PER_THREAD, ROW_UNIT = 2, 24


def _literal(v, what):
    if not isinstance(v, types.IntegerLiteral):
        raise TypingError(f"{what} must be a constant, not {v}")
    return v.literal_value


def _i64(context, builder, value, ty):
    return context.cast(builder, value, ty, types.int64)


def _accumulate(builder, count, step, n, body):
    """``acc = body(k, acc)`` for k in range(0, count, step), ``acc`` n <16 x float> vectors
    from zero, as one LLVM loop whose accumulators are phis (so they stay in registers);
    returns their final values."""
    i64, zero = ir.IntType(64), ir.Constant(ir.VectorType(ir.FloatType(), LANES), None)
    pre = builder.block
    loop, done = builder.append_basic_block("k"), builder.append_basic_block("k.done")
    builder.cbranch(builder.icmp_signed(">", count, ir.Constant(i64, 0)), loop, done)
    builder.position_at_end(loop)
    k = builder.phi(i64)
    acc = [builder.phi(zero.type) for _ in range(n)]
    new = body(k, acc)
    k1 = builder.add(k, ir.Constant(i64, step))
    builder.cbranch(builder.icmp_signed("<", k1, count), loop, done)
    k.add_incoming(ir.Constant(i64, 0), pre)
    k.add_incoming(k1, loop)
    builder.position_at_end(done)
    final = [builder.phi(zero.type) for _ in range(n)]  # LLVM wants a block's phis first
    for a, f, v in zip(acc, final, new):
        for phi in (a, f):
            phi.add_incoming(zero, pre)
            phi.add_incoming(v, loop)
    return final


def _fma(builder, a, b, c):
    module = builder.module
    name = f"llvm.fma.v{a.type.count}f32"
    fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(a.type, [a.type] * 3), name=name)
    return builder.call(fn, [a, b, c])


@intrinsic
def _tile(typingctx, w, w0, ws, x, x0, xs, kc, c, c0, cs, RO, RV):
    """``c[c0 + r*cs + 16v : +16] = sum over k < kc of w[w0 + r*ws + k] * x[x0 + k*xs + 16v : +16]``
    for r < RO, v < RV: one tile, its accumulators in registers from the first k to the last."""
    ro, rv = _literal(RO, "RO"), _literal(RV, "RV")
    ints = (w0, ws, x0, xs, kc, c0, cs)
    if not all(isinstance(t, types.Integer) for t in ints):
        raise TypingError("the offsets and strides must be integers")

    def codegen(context, builder, signature, args):
        f32 = ir.FloatType()
        vec = ir.VectorType(f32, LANES)
        i64 = ir.IntType(64)
        wa, xa, ca = (context.make_array(signature.args[i])(context, builder, args[i]).data for i in (0, 3, 7))
        w0_, ws_, x0_, xs_, kc_ = (_i64(context, builder, args[i], signature.args[i]) for i in (1, 2, 4, 5, 6))
        c0_, cs_ = (_i64(context, builder, args[i], signature.args[i]) for i in (8, 9))

        def vptr(data, index):
            return builder.bitcast(builder.gep(data, [index], inbounds=True), vec.as_pointer())

        def c_at(r, v):
            return builder.add(c0_, builder.add(builder.mul(cs_, ir.Constant(i64, r)), ir.Constant(i64, LANES * v)))

        rows = [builder.add(w0_, builder.mul(ws_, ir.Constant(i64, r))) for r in range(ro)]

        def step(k, acc):
            xrow = builder.add(x0_, builder.mul(k, xs_))
            xv = [builder.load(vptr(xa, builder.add(xrow, ir.Constant(i64, LANES * v))), align=4) for v in range(rv)]
            new = []
            for r in range(ro):
                s = builder.load(builder.gep(wa, [builder.add(rows[r], k)], inbounds=True), align=4)
                b = builder.shuffle_vector(
                    builder.insert_element(ir.Constant(vec, ir.Undefined), s, ir.Constant(ir.IntType(32), 0)),
                    ir.Constant(vec, ir.Undefined),
                    ir.Constant(ir.VectorType(ir.IntType(32), LANES), None),
                )
                new.extend(_fma(builder, b, xv[v], acc[r * rv + v]) for v in range(rv))
            return new

        final = _accumulate(builder, kc_, 1, ro * rv, step)
        for i, out in enumerate(final):
            builder.store(out, vptr(ca, c_at(i // rv, i % rv)), align=4)
        return context.get_dummy_value()

    sig = types.void(w, w0, ws, x, x0, xs, kc, c, c0, cs, RO, RV)
    return sig, codegen


def _hsum(builder, v):
    """The sum of a vector's lanes, as a fixed tree of halves (the same order every call)."""
    n = v.type.count
    while n > 1:
        n //= 2
        lo, hi = (
            builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), n), list(range(s, s + n))))
            for s in (0, n)
        )
        v = builder.fadd(lo, hi)
    return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))


@intrinsic
def _dots(typingctx, w, w0, ws, xt, K, c, c0, cs, RO, T):
    """``c[c0 + r*cs + t] = w[w0 + r*ws : +K] . xt[t*K : +K]`` for r < RO, t < T, K a multiple of
    16: the last one or two columns of a product as dot products, 16 k at a time (cheaper than
    a vector of columns that would be mostly padding: P = 49 is 3 vectors and one column)."""
    ro, nt = _literal(RO, "RO"), _literal(T, "T")

    def codegen(context, builder, signature, args):
        vec = ir.VectorType(ir.FloatType(), LANES)
        i64 = ir.IntType(64)
        wa, xa, ca = (context.make_array(signature.args[i])(context, builder, args[i]).data for i in (0, 3, 5))
        w0_, ws_, k_, c0_, cs_ = (_i64(context, builder, args[i], signature.args[i]) for i in (1, 2, 4, 6, 7))

        def vptr(data, index):
            return builder.bitcast(builder.gep(data, [index], inbounds=True), vec.as_pointer())

        rows = [builder.add(w0_, builder.mul(ws_, ir.Constant(i64, r))) for r in range(ro)]
        cols = [builder.mul(k_, ir.Constant(i64, t)) for t in range(nt)]

        def step(k, acc):
            xv = [builder.load(vptr(xa, builder.add(cols[t], k)), align=4) for t in range(nt)]
            new = []
            for r in range(ro):
                wv = builder.load(vptr(wa, builder.add(rows[r], k)), align=4)
                new.extend(_fma(builder, wv, xv[t], acc[r * nt + t]) for t in range(nt))
            return new

        final = _accumulate(builder, k_, LANES, ro * nt, step)
        for i, out in enumerate(final):
            r, t = divmod(i, nt)
            at = builder.add(c0_, builder.add(builder.mul(cs_, ir.Constant(i64, r)), ir.Constant(i64, t)))
            builder.store(_hsum(builder, out), builder.gep(ca, [at], inbounds=True), align=4)
        return context.get_dummy_value()

    return types.void(w, w0, ws, xt, K, c, c0, cs, RO, T), codegen


@numba.njit(inline="always", **JIT)
def _tile_of(w, K, x, xs, c, cs, o, p, rv, ro):
    """One tile of ``ro`` rows (12, 8 or 1) by ``rv`` vectors (1 to 3) at row o, column p:
    the constants the microkernel is compiled for, chosen by branch."""
    at_w, at_c = o * K, o * cs + p
    if ro == 12:
        _tile(w, at_w, K, x, p, xs, K, c, at_c, cs, 12, 1)
    elif ro == 8 and rv == 3:
        _tile(w, at_w, K, x, p, xs, K, c, at_c, cs, 8, 3)
    elif ro == 8 and rv == 2:
        _tile(w, at_w, K, x, p, xs, K, c, at_c, cs, 8, 2)
    elif ro == 8:
        _tile(w, at_w, K, x, p, xs, K, c, at_c, cs, 8, 1)
    elif rv == 3:
        _tile(w, at_w, K, x, p, xs, K, c, at_c, cs, 1, 3)
    elif rv == 2:
        _tile(w, at_w, K, x, p, xs, K, c, at_c, cs, 1, 2)
    else:
        _tile(w, at_w, K, x, p, xs, K, c, at_c, cs, 1, 1)


@numba.njit(inline="always", **JIT)
def _dots_of(w, K, xt, tail, c, cs, o, p, ro):
    """The dot-product columns (``tail``: 1 or 2) of ``ro`` rows at row o, column p: four rows
    at a time, then one."""
    r = 0
    while r < ro:
        at_w, at_c = (o + r) * K, (o + r) * cs + p
        if r + 4 <= ro:
            if tail == 2:
                _dots(w, at_w, K, xt, K, c, at_c, cs, 4, 2)
            else:
                _dots(w, at_w, K, xt, K, c, at_c, cs, 4, 1)
            r += 4
        else:
            if tail == 2:
                _dots(w, at_w, K, xt, K, c, at_c, cs, 1, 2)
            else:
                _dots(w, at_w, K, xt, K, c, at_c, cs, 1, 1)
            r += 1


@numba.njit(**JIT)
def _rows_block(w, K, x, xs, vectors, xt, tail, c, cs, o0, o1):
    """Rows o0 .. o1-1 of c (O, cs) = w (O, K) @ [x (K, 16*vectors, row stride xs), xt.T].
    A tile's rows of w are read from memory once, front to back, and stay in cache for the
    tile's other columns and the dot products.

    Tiles of two vectors are 8 rows, not 12: 12 x 2 (24 accumulators) spilled vectors to the
    stack, LLVM unrolling the k loop by two and loading both steps' broadcasts first (38 spills
    and reloads in the loop compiled for znver4, 50 for sapphirerapids and skylake-avx512; none
    for 8 x 2, 8 x 3 or 12 x 1). One thread on an AMD EPYC (Zen 4), GFLOP/s 12 x 2 -> 8 x 2:
    Winograd F(4x4)'s 36 products (1152, 32) @ (32, 64) 36 -> 105, (256, 64) @ (64, 64) 44 ->
    114, (1152, 64) @ (64, 32) 43 -> 106; a batch-1 3x3 layer's (256, 2304) @ (2304, 64),
    weights from memory, 79 -> 98."""
    per = 3 if vectors == 3 else 2  # 3 vectors: one tile of 8 x 3; else tiles of 8 x 2 (12 x 1)
    big = 12 if vectors == 1 else 8
    tiles = -(-vectors // per)
    o = o0
    while o < o1:
        if o1 - o0 >= big:
            # the last tile moved back to end at o1: it makes a few rows again, to the same
            # bits (each output is the same chain of multiply-adds whatever the tile)
            o, ro = min(o, o1 - big), big
        else:
            ro = 1
        p = 0
        for t in range(tiles):  # the vectors shared out evenly: 5 as 2, 2, 1
            rv = vectors * (t + 1) // tiles - vectors * t // tiles
            _tile_of(w, K, x, xs, c, cs, o, p, rv, ro)
            p += rv * LANES
        if tail > 0:
            _dots_of(w, K, xt, tail, c, cs, o, p, ro)
        o += ro


@numba.njit(**JIT)
def _pad_columns(x, K, P, pv, out):
    """out (K, pv) = x (K, P) with zero columns after P."""
    zero = out.dtype.type(0)
    for k in range(K):
        src, dst = uint64(k * P), uint64(k * pv)
        for p in range(uint64(P)):
            out[dst + p] = x[src + p]
        for p in range(uint64(P), uint64(pv)):
            out[dst + p] = zero


@numba.njit(**JIT)
def _unpad(c, o0, o1, P, pv, out):
    """Rows o0 .. o1-1 of out (O, P) = those of c (O, pv), the padding dropped."""
    for o in range(o0, o1):
        src, dst = uint64(o * pv), uint64(o * P)
        for p in range(uint64(P)):
            out[dst + p] = c[src + p]


def _host_has_avx512() -> bool:
    from llvmlite import binding

    return bool(binding.get_host_cpu_features().get("avx512f", False))


#: The 16-lane vectors and 24 accumulators need AVX-512's 32 vector registers: elsewhere
#: LLVM splits them and spills, and OpenBLAS takes every product.
VECTORS = _host_has_avx512()


def takes(w, x) -> bool:
    """Does the skinny product take ``w @ x`` (``x`` one (K, P) matrix or a stack of them)? The
    rule, one place for every caller so that they give the same bits:

    ==========================  =========================================================
    operands                    float32, ``w`` 2-d and C-contiguous, ``x``'s K matching
    columns                     2 <= P <= :data:`MAX_P` (from 196 OpenBLAS was faster; at
                                P = 1, a matrix-vector product, BLAS packs nothing and
                                the two were even: 1.08x)
    weights                     at least :data:`MIN_WEIGHT_BYTES` (below, they stay in
                                cache and OpenBLAS's repacking costs little; not measured)
    the machine                 AVX-512 (:data:`VECTORS`)
    ==========================  =========================================================

    >>> takes(np.ones((512, 2048), np.float32), np.ones((2048, 49), np.float32)) == VECTORS
    True
    >>> takes(np.ones((512, 2048), np.float32), np.ones((2048, 196), np.float32))
    False
    """
    return (
        VECTORS
        and w.ndim == 2
        and x.ndim in (2, 3)
        and w.dtype == np.float32
        and x.dtype == np.float32
        and w.flags.c_contiguous
        and w.nbytes >= MIN_WEIGHT_BYTES
        and w.shape[1] == x.shape[-2]
        and 2 <= x.shape[-1] <= MAX_P
    )


def matmul(w, x, out=None, threads=1, then=None):
    """``w @ x`` for float32 ``w`` (O, K), C-contiguous, and ``x`` (K, P) (any P: :func:`takes`
    says where it pays), into ``out`` (O, P) if given, on ``threads`` threads;
    ``then(o0, o1, 0, P)``, if given, after each block of rows is written, on the thread that
    wrote it (a convolution's epilogue)."""
    if w.dtype != np.float32 or x.dtype != np.float32 or (out is not None and out.dtype != np.float32):
        raise TypeError(f"skinny.matmul takes float32 operands, not {w.dtype} @ {x.dtype}")
    if w.ndim != 2 or x.ndim != 2 or w.shape[1] != x.shape[0]:
        raise ValueError(f"skinny.matmul: shapes {w.shape} and {x.shape} do not multiply as (O, K) @ (K, P)")
    w = np.ascontiguousarray(w)  # the tiles read its rows in place
    o, k = w.shape
    p = x.shape[1]
    if out is None:
        out = np.empty((o, p), np.float32)
    vectors, tail = divmod(p, LANES)
    direct = out.flags.c_contiguous and tail <= MAX_TAIL and k % LANES == 0
    if direct:  # full vectors of columns read in place, the last columns as dot products
        xs, c = np.ascontiguousarray(x), out
        xt = np.ascontiguousarray(xs[:, vectors * LANES :].T)
        cs = p
    else:  # columns padded to whole vectors, the product into a padded scratch
        vectors, tail, cs = -(-p // LANES), 0, -(-p // LANES) * LANES
        xs = np.empty((k, cs), np.float32)
        _pad_columns(np.ascontiguousarray(x).reshape(-1), k, p, cs, xs.reshape(-1))
        xt = xs[:0]
        c = np.empty((o, cs), np.float32)
    # Two blocks a thread (one in all on one thread): each block is a call from Python, whose
    # argument checks hold the GIL; blocks of 96 rows gained nothing from a second thread.
    blocks = 1 if threads <= 1 else min(BLOCKS_PER_THREAD * threads, -(-o // ROW_UNIT))
    edges = [min(o, -(-o * i // blocks) // ROW_UNIT * ROW_UNIT) for i in range(blocks)] + [o]
    wf, xf, tf, cf = w.reshape(-1), xs.reshape(-1), xt.reshape(-1), c.reshape(-1)

    def block(i):
        o0, o1 = edges[i], edges[i + 1]
        _rows_block(wf, k, xf, xs.shape[1], vectors, tf, tail, cf, cs, o0, o1)
        if not direct:
            if out.flags.c_contiguous:
                _unpad(cf, o0, o1, p, cs, out.reshape(-1))
            else:
                out[o0:o1] = c[o0:o1, :p]
        if then is not None:
            then(o0, o1, 0, p)

    blas.on_demand(len(edges) - 1, threads, block)
    return out


# ----------------------------------------------------------------------------- stacked
#: Stacked products with a short sum take the row kernel (:func:`stacked`): Winograd F(4x4)'s
#: 36 products of a chunk, (T, C) @ (C, K) and, for the input gradient, (T, K) @ (K, C), with
#: at most STACKED_MAX_K terms (C or K) and at most STACKED_MAX_P output columns, whole
#: vectors. There OpenBLAS spends much of each product packing both operands for a sum of a
#: few dozen terms. One thread, 36 products, this kernel's time over OpenBLAS's (AVX-512
#: machine, medians of 20): (1152, 32) @ (32, 64) 0.68, (1152, 64) @ (64, 32) 0.77, (256, 64)
#: @ (64, 64) 0.78, (512, 64) @ (64, 64) 0.80; with 128 terms 0.92, 256 0.93, 512 1.38 (the
#: 12 x 2 tiles then, which spilled: _rows_block). With 8 x 2 tiles on the AMD EPYC (Zen 4),
#: (1152, 64) @ (64, 64) 0.76, (512, 128) @ (128, 128) 0.84, (1152, 128) @ (128, 128) 0.94,
#: (512, 256) @ (256, 128) 0.91; ResNet-18's 128-channel layers on it, in one process against
#: 64 terms (30 alternating W3-train steps, twice): 0.985 and 0.986 of the step, W3-infer 0.985.
STACKED_MAX_K = 128
STACKED_MAX_P = 128
_NO_TAIL = np.zeros(0, np.float32)


def stacked_fits(terms, columns, dtype) -> bool:
    """Would :func:`stacked` take products of ``terms`` terms into ``columns`` columns of ``dtype``?

    >>> stacked_fits(64, 64, np.float32) == VECTORS, stacked_fits(512, 64, np.float32)
    (True, False)
    """
    return (
        VECTORS
        and np.dtype(dtype) == np.float32
        and 0 < terms <= STACKED_MAX_K
        and columns % LANES == 0
        and 0 < columns <= STACKED_MAX_P
    )


def stacked_operand(b):
    """``b`` (S, K, P), the right-hand side of stacked products, as :func:`stacked` reads it: a
    C-contiguous copy of a view where the kernel would take its products, else ``b`` itself."""
    if stacked_fits(b.shape[1], b.shape[2], b.dtype):
        return np.ascontiguousarray(b)
    return b


def stacked(a, b, out):
    """``out[s] = a[s] @ b[s]`` for stacks of float32 matrices, ``a`` (S, O, K), ``b`` (S, K, P),
    ``out`` (S, O, P), on the calling thread: the row kernel where :func:`stacked_fits` and all
    three are C-contiguous, else NumPy's matmul (BLAS). Each output of the row kernel is one
    chain of fused multiply-adds over k in order, so its bits do not depend on O or the tiles.

    >>> a, b = np.ones((2, 24, 32), np.float32), np.ones((2, 32, 16), np.float32)
    >>> bool((stacked(a, b, np.empty((2, 24, 16), np.float32)) == 32).all())
    True
    """
    s, o, k = a.shape
    p = b.shape[2]
    if not (
        stacked_fits(k, p, a.dtype)
        and a.dtype == b.dtype == out.dtype
        and a.flags.c_contiguous
        and b.flags.c_contiguous
        and out.flags.c_contiguous
    ):
        return np.matmul(a, b, out=out)
    _stacked_rows(a.reshape(-1), b.reshape(-1), out.reshape(-1), s, o, k, p, _NO_TAIL)
    return out


@numba.njit(**JIT)
def _stacked_rows(a, b, c, S, O, K, P, none):
    """c[s] = a[s] @ b[s] for s < S: each product's rows by :func:`_rows_block`."""
    for s in range(S):
        _rows_block(
            a[s * O * K : (s + 1) * O * K],
            K,
            b[s * K * P : (s + 1) * K * P],
            P,
            P // LANES,
            none,
            0,
            c[s * O * P : (s + 1) * O * P],
            P,
            0,
            O,
        )

"""Python binding on the CUDA backend (skipped without torch, a GPU, or a libsdpa
built with CUDA): forward and gradients against torch's SDPA math backend and a
float64 reference, flash_attn_func / flash_attn_with_kvcache / xformers forms,
CUDA graph capture and torch.compile.

Tolerance (as flash_attn's tests): max |sdpa - ref64| <= 2 * max |math - ref64| + atol,
where `math` is torch's math backend in the same low precision.
A problem the CUDA backend does not cover (SDPA_ERR_NOT_SUPPORTED) is skipped with
the library's message, so the report lists what is missing without failing."""
import functools
import math

import os

import pytest

torch = pytest.importorskip("torch")

import sdpa  # noqa: E402
from sdpa import SdpaError  # noqa: E402
import torch_reference as TR  # noqa: E402


def _cuda_ok():
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    try:
        if not sdpa.cuda_available():
            # CTest sets SDPA_REQUIRE_CUDA=1 for a CUDA build: with a GPU present,
            # a library that cannot use it must fail the suite, not skip it.
            if os.environ.get("SDPA_REQUIRE_CUDA") == "1":
                raise RuntimeError("SDPA_REQUIRE_CUDA=1 but libsdpa (%s) has no usable CUDA backend"
                                   % sdpa.library_path())
            return False, "libsdpa has no CUDA backend (or sees no device)"
    except OSError as e:
        if os.environ.get("SDPA_LIBRARY"):
            raise
        return False, "libsdpa not loadable: %s" % e
    return True, ""


_ok, _why = _cuda_ok()
pytestmark = pytest.mark.skipif(not _ok, reason=_why)

DEV = "cuda"
ATOL = {torch.float16: 1e-3, torch.bfloat16: 4e-3}


def skip_unsupported(fn):
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except SdpaError as e:
            if e.status == sdpa.SDPA_ERR_NOT_SUPPORTED:
                pytest.skip("CUDA backend: %s" % e.message)
            raise
    return wrapper


def torch_math(q, k, v, causal=False, scale=None, bias=None):
    """torch's math backend in the inputs' dtype ([b, s, h, d] layout, top-left causal)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    h, hk = q.shape[2], k.shape[2]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k.repeat_interleave(h // hk, 2),
                                              v.repeat_interleave(h // hk, 2)))
    # Since torch 2.5 the math backend upcasts fp16/bf16 to fp32 unless told
    # otherwise; docs/design.md §7 wants math *in the storage dtype* (as
    # flash_attn's tests' upcast=False reference), so allow the reduced math
    # for this call (the autograd graph it records is then in that dtype too).
    allow = getattr(torch.backends.cuda, "allow_fp16_bf16_reduction_math_sdp", None)
    allowed = getattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed", None)
    prev = allowed() if allowed else None
    if allow:
        allow(True)
    try:
        with sdpa_kernel([SDPBackend.MATH]):
            o = torch.nn.functional.scaled_dot_product_attention(
                qt, kt, vt, attn_mask=bias, is_causal=causal, scale=scale)
    finally:
        if allow and prev is not None:
            allow(prev)
    return o.transpose(1, 2)


def assert_close(got, ref64, lowp, dtype, what):
    err = (got.double() - ref64).abs().max().item()
    # docs/design.md §7: the bound derives from the storage dtype's own error,
    # the larger of torch's math backend and the rounding of the exact result
    # (an output stored in bf16 cannot beat half an ulp of its largest element).
    rounded = ref64.to(dtype).double()
    base = max((lowp.double() - ref64).abs().max().item(), (rounded - ref64).abs().max().item())
    scale = max(1.0, ref64.abs().max().item())
    bound = 2 * base + ATOL[dtype] * scale
    assert err <= bound, "%s: max err %.3g > bound %.3g (math backend err %.3g)" % (
        what, err, bound, base)


def rand(*shape, dtype, requires_grad=False):
    return torch.randn(*shape, device=DEV, dtype=dtype).requires_grad_(requires_grad)


SHAPES = [(2, 128, 128, 8, 8, 64), (1, 257, 257, 8, 2, 128), (2, 64, 64, 4, 1, 96)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@skip_unsupported
def test_forward_backward_vs_math_and_float64(dtype, shape, causal):
    torch.manual_seed(0)
    b, s_q, s_k, h, hk, d = shape
    q = rand(b, s_q, h, d, dtype=dtype, requires_grad=True)
    k = rand(b, s_k, hk, d, dtype=dtype, requires_grad=True)
    v = rand(b, s_k, hk, d, dtype=dtype, requires_grad=True)
    out = sdpa.forward(q, k, v, causal=causal)
    ref, _ = TR.attention(q, k, v, causal=causal)
    pt = torch_math(q, k, v, causal=causal)
    assert_close(out, ref, pt, dtype, "out")
    dout = torch.randn_like(out)
    g = torch.autograd.grad(out, (q, k, v), dout)
    gr = torch.autograd.grad(ref, (q, k, v), dout.double())
    gp = torch.autograd.grad(pt, (q, k, v), dout)
    for name, a, r, p in zip(("dq", "dk", "dv"), g, gr, gp):
        assert_close(a, r, p, dtype, name)


@pytest.mark.parametrize("dtype", [torch.bfloat16])
@skip_unsupported
def test_modifiers_vs_float64(dtype):
    torch.manual_seed(1)
    b, s_q, s_k, h, hk, d = 2, 96, 160, 8, 4, 64
    q, k, v = rand(b, s_q, h, d, dtype=dtype), rand(b, s_k, hk, d, dtype=dtype), \
        rand(b, s_k, hk, d, dtype=dtype)
    bias = rand(1, h, 1, s_k, dtype=dtype).expand(b, h, s_q, s_k)
    slopes = torch.rand(h, device=DEV) * 0.2
    for m in [dict(causal=True), dict(window=(32, 8)), dict(softcap=20.0),
              dict(alibi_slopes=slopes), dict(bias=bias), dict(causal=True, align="top-left")]:
        out, lse = sdpa.forward(q, k, v, return_lse=True, **m)
        ref, ref_lse = TR.attention(q, k, v, **m)
        low, _ = TR.attention(q, k, v, dtype=torch.float32, **m)
        assert_close(out, ref, low.to(dtype), dtype, str(list(m)))
        fin = torch.isfinite(ref_lse)
        assert (lse.double()[fin] - ref_lse[fin]).abs().max() < 1e-2


@skip_unsupported
def test_flash_attn_func_gqa_bf16_with_grads():
    from sdpa.flash_attn_interface import flash_attn_func
    torch.manual_seed(2)
    dtype = torch.bfloat16
    q = rand(2, 200, 16, 128, dtype=dtype, requires_grad=True)
    k = rand(2, 200, 4, 128, dtype=dtype, requires_grad=True)
    v = rand(2, 200, 4, 128, dtype=dtype, requires_grad=True)
    out, lse, _ = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert lse.shape == (2, 16, 200) and lse.dtype == torch.float32
    ref, _ = TR.attention(q, k, v, causal=True)
    pt = torch_math(q, k, v, causal=True)
    assert_close(out, ref, pt, dtype, "out")
    dout = torch.randn_like(out)
    for name, a, r, p in zip(("dq", "dk", "dv"), torch.autograd.grad(out, (q, k, v), dout),
                             torch.autograd.grad(ref, (q, k, v), dout.double()),
                             torch.autograd.grad(pt, (q, k, v), dout)):
        assert_close(a, r, p, dtype, name)


@pytest.mark.parametrize("paged", [False, True])
@skip_unsupported
def test_flash_attn_with_kvcache(paged):
    from sdpa.flash_attn_interface import flash_attn_with_kvcache
    torch.manual_seed(3)
    dtype = torch.bfloat16
    b, hk, h, d, sc, page = 4, 2, 8, 128, 512, 64
    kc = rand(b, sc, hk, d, dtype=dtype)
    vc = rand(b, sc, hk, d, dtype=dtype)
    q = rand(b, 1, h, d, dtype=dtype)
    kn, vn = rand(b, 1, hk, d, dtype=dtype), rand(b, 1, hk, d, dtype=dtype)
    seqlens = torch.tensor([0, 17, 300, 511], dtype=torch.int32, device=DEV)
    full_k, full_v = kc.clone(), vc.clone()
    kw = {}
    if paged:
        nb = sc // page
        table = torch.randperm(b * nb, device=DEV).to(torch.int32).view(b, nb)
        kp = torch.empty(b * nb, page, hk, d, dtype=dtype, device=DEV)
        vp = torch.empty_like(kp)
        kp[table.flatten().long()] = kc.view(b * nb, page, hk, d)
        vp[table.flatten().long()] = vc.view(b * nb, page, hk, d)
        kc_arg, vc_arg, kw["block_table"] = kp, vp, table
    else:
        kc_arg, vc_arg = kc, vc
    out = flash_attn_with_kvcache(q, kc_arg, vc_arg, kn, vn, cache_seqlens=seqlens, causal=True,
                                  **kw)
    for i in range(b):
        n = int(seqlens[i])
        full_k[i, n], full_v[i, n] = kn[i, 0], vn[i, 0]
        ref, _ = TR.attention(q[i:i + 1], full_k[i:i + 1, :n + 1], full_v[i:i + 1, :n + 1],
                              causal=True)
        low, _ = TR.attention(q[i:i + 1], full_k[i:i + 1, :n + 1], full_v[i:i + 1, :n + 1],
                              causal=True, dtype=torch.float32)
        assert_close(out[i:i + 1], ref, low.to(dtype), dtype, "out[%d]" % i)
    if not paged:
        assert torch.equal(kc_arg[torch.arange(b), seqlens.long()], kn[:, 0])


@skip_unsupported
def test_xformers_forms():
    from sdpa import xformers_ops as xops
    torch.manual_seed(4)
    dtype = torch.float16
    B, M, N, H, K = 2, 100, 130, 8, 64
    q, k, v = rand(B, M, H, K, dtype=dtype), rand(B, N, H, K, dtype=dtype), \
        rand(B, N, H, K, dtype=dtype)
    for mask, m in [(None, {}), (xops.LowerTriangularMask(), dict(causal=True, align="top-left")),
                    (xops.LowerTriangularFromBottomRightMask(), dict(causal=True))]:
        out = xops.memory_efficient_attention(q, k, v, attn_bias=mask)
        ref, _ = TR.attention(q, k, v, **m)
        low, _ = TR.attention(q, k, v, dtype=torch.float32, **m)
        assert_close(out, ref, low.to(dtype), dtype, type(mask).__name__)
    t = rand(B, H, M, N, dtype=dtype)
    out = xops.memory_efficient_attention(q, k, v, attn_bias=t)
    ref, _ = TR.attention(q, k, v, bias=t)
    assert_close(out, ref, torch_math(q, k, v, bias=t), dtype, "tensor bias")
    ql, kl = [30, 70, 1], [50, 80, 16]  # keys >= queries in each block (xformers refuses fewer)
    bd = xops.BlockDiagonalMask.from_seqlens(ql, kl).make_causal_from_bottomright()
    qc, kc, vc = rand(1, sum(ql), H, K, dtype=dtype), rand(1, sum(kl), H, K, dtype=dtype), \
        rand(1, sum(kl), H, K, dtype=dtype)
    out = xops.memory_efficient_attention(qc, kc, vc, attn_bias=bd)
    qs, ks = bd.q_seqinfo.seqstart_py, bd.k_seqinfo.seqstart_py
    for i in range(3):
        sq, sk = slice(qs[i], qs[i + 1]), slice(ks[i], ks[i + 1])
        ref, _ = TR.attention(qc[:, sq], kc[:, sk], vc[:, sk], causal=True)
        low, _ = TR.attention(qc[:, sq], kc[:, sk], vc[:, sk], causal=True, dtype=torch.float32)
        assert_close(out[:, sq], ref, low.to(dtype), dtype, "block %d" % i)


@skip_unsupported
def test_cuda_graph_capture():
    from sdpa.flash_attn_interface import flash_attn_func
    torch.manual_seed(5)
    dtype = torch.bfloat16
    q, k, v = (rand(2, 128, 8, 64, dtype=dtype) for _ in range(3))
    eager = flash_attn_func(q, k, v, causal=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on a side stream, as torch's docs ask
        flash_attn_func(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = flash_attn_func(q, k, v, causal=True)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    q.copy_(torch.randn_like(q))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, flash_attn_func(q, k, v, causal=True))


@skip_unsupported
def test_split_kv_decoding_in_a_graph():
    """A split-KV decoding call (its partials in the library's stream-ordered
    workspace: alloc and free nodes in the graph) captured in a CUDA graph and
    replayed: equal to the eager call bitwise, and after new inputs to the
    float64 reference within the tolerance."""
    torch.manual_seed(9)
    dtype = torch.bfloat16
    b, hk, h, d, sc = 2, 2, 8, 128, 1000
    kc, vc = rand(b, sc, hk, d, dtype=dtype), rand(b, sc, hk, d, dtype=dtype)
    q = rand(b, 1, h, d, dtype=dtype)
    seqlens = torch.tensor([999, 517], dtype=torch.int32, device=DEV)
    eager = sdpa.forward(q, kc, vc, cache_seqlens=seqlens, num_splits=8)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    out = torch.empty_like(q)
    with torch.cuda.stream(s):
        sdpa.forward(q, kc, vc, cache_seqlens=seqlens, num_splits=8, out=out)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        sdpa.forward(q, kc, vc, cache_seqlens=seqlens, num_splits=8, out=out)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    q.copy_(torch.randn_like(q))
    kc.copy_(torch.randn_like(kc))
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    for i in range(b):
        n = int(seqlens[i])
        ref, _ = TR.attention(q[i:i + 1], kc[i:i + 1, :n], vc[i:i + 1, :n])
        low, _ = TR.attention(q[i:i + 1], kc[i:i + 1, :n], vc[i:i + 1, :n], dtype=torch.float32)
        assert_close(out[i:i + 1], ref, low.to(dtype), dtype, "graph out[%d]" % i)
    assert torch.equal(out, sdpa.forward(q, kc, vc, cache_seqlens=seqlens, num_splits=8))


# CUgraphNodeType (cuda.h): what the test below counts
_KERNEL_NODE, _MEM_ALLOC_NODE, _MEM_FREE_NODE = 0, 10, 11


def _graph_node_types(fn):
    """fn() captured in a CUDA graph (after an eager warm-up call): the type of
    each of the graph's nodes, read through the driver API (cuGraphGetNodes,
    cuGraphNodeGetType) from the graph torch keeps uninstantiated."""
    import ctypes
    fn()
    torch.cuda.synchronize()
    try:
        g = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:  # torch < 2.8: the captured graph is not kept to read
        pytest.skip("torch.cuda.CUDAGraph(keep_graph=True) needs torch >= 2.8")
    with torch.cuda.graph(g):
        fn()
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuGraphGetNodes.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    cu.cuGraphNodeGetType.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    graph = ctypes.c_void_p(g.raw_cuda_graph())
    n = ctypes.c_size_t(0)
    assert cu.cuGraphGetNodes(graph, None, ctypes.byref(n)) == 0
    nodes = (ctypes.c_void_p * n.value)()
    assert cu.cuGraphGetNodes(graph, nodes, ctypes.byref(n)) == 0
    types = []
    for node in nodes:
        t = ctypes.c_int(-1)
        assert cu.cuGraphNodeGetType(node, ctypes.byref(t)) == 0
        types.append(t.value)
    return sorted(types)


@skip_unsupported
def test_graph_capture_takes_the_workspace_from_torch():
    """Captured in a CUDA graph, a split-KV decoding call through the binding
    takes its workspace from torch's allocator: the graph is the attention
    kernel and its combine, no memory-allocation or free node, where the same
    call made through sdpa_fwd with no workspace (the library's stream-ordered
    allocation) has one of each: the check that the count could see them."""
    import ctypes
    from sdpa import _core, _lib
    torch.manual_seed(10)
    dtype = torch.bfloat16
    kc, vc = rand(1, 4096, 8, 128, dtype=dtype), rand(1, 4096, 8, 128, dtype=dtype)
    q = rand(1, 1, 32, 128, dtype=dtype)
    seqlens = torch.full((1,), 4096, dtype=torch.int32, device=DEV)
    out = torch.empty_like(q)
    binding = _graph_node_types(
        lambda: sdpa.forward(q, kc, vc, cache_seqlens=seqlens, num_splits=8, out=out))
    desc = _core._build_fwd(q, kc, vc, cache_seqlens=seqlens, num_splits=8, out=out)[0]

    def library_workspace():
        desc.attn.stream = torch.cuda.current_stream().cuda_stream
        _lib.check(_lib.lib().sdpa_fwd(ctypes.byref(desc)))
    library = _graph_node_types(library_workspace)
    assert binding == [_KERNEL_NODE, _KERNEL_NODE], binding
    assert library == [_KERNEL_NODE, _KERNEL_NODE, _MEM_ALLOC_NODE, _MEM_FREE_NODE], library


@skip_unsupported
def test_each_call_reads_the_current_stream():
    """The binding caches nothing per stream: a call inside torch.cuda.stream(s) is
    described with s and runs there, the next one outside with the current stream
    again; the outputs equal those of the default stream."""
    from sdpa import _core
    torch.manual_seed(8)
    q, k, v = (rand(2, 33, 4, 64, dtype=torch.bfloat16) for _ in range(3))
    ref = sdpa.forward(q, k, v, causal=True)
    cur = torch.cuda.current_stream().cuda_stream
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        d1 = _core._build_fwd(q, k, v)[0]
        out = sdpa.forward(q, k, v, causal=True)
    d2 = _core._build_fwd(q, k, v)[0]
    assert d1.attn.device == sdpa._lib.SDPA_DEVICE_CUDA
    assert d1.attn.stream == s.cuda_stream != cur
    assert (d2.attn.stream or 0) == cur
    s.synchronize()
    assert torch.equal(out, ref)


@skip_unsupported
def test_torch_compile_inductor():
    from sdpa import torch_ops
    if not torch_ops.HAVE_CUSTOM_OP:
        pytest.skip("torch without torch.library.custom_op")
    from sdpa.flash_attn_interface import flash_attn_func
    torch.manual_seed(6)
    dtype = torch.bfloat16

    def f(q, k, v):
        return flash_attn_func(q * 2, k, v, causal=True).float().square().mean()

    q, k, v = (rand(2, 64, 4, 64, dtype=dtype, requires_grad=True) for _ in range(3))
    eager = torch.autograd.grad(f(q, k, v), (q, k, v))
    comp = torch.autograd.grad(torch.compile(f, fullgraph=True)(q, k, v), (q, k, v))
    for a, b in zip(eager, comp):
        assert (a.float() - b.float()).abs().max() < 1e-2


@skip_unsupported
def test_varlen_and_merge_cuda():
    torch.manual_seed(7)
    dtype = torch.bfloat16
    lens = [100, 3, 257]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=DEV)
    q, k, v = (rand(sum(lens), 8, 64, dtype=dtype) for _ in range(3))
    out, lse = sdpa.forward(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=257,
                            max_seqlen_k=257, causal=True, return_lse=True)
    assert lse.shape == (8, sum(lens))
    for i in range(3):
        sl = slice(int(cu[i]), int(cu[i + 1]))
        ref, _ = TR.attention(q[None, sl], k[None, sl], v[None, sl], causal=True)
        low, _ = TR.attention(q[None, sl], k[None, sl], v[None, sl], causal=True,
                              dtype=torch.float32)
        assert_close(out[None, sl], ref, low.to(dtype), dtype, "seq %d" % i)
    # merge two halves of the keys
    qd, kd, vd = rand(1, 64, 8, 64, dtype=dtype), rand(1, 300, 8, 64, dtype=dtype), \
        rand(1, 300, 8, 64, dtype=dtype)
    parts = [sdpa.forward(qd, kd[:, a:z], vd[:, a:z], return_lse=True)
             for a, z in ((0, 120), (120, 300))]
    out_parts = torch.stack([p[0][0].float() for p in parts])
    lse_parts = torch.stack([p[1][0] for p in parts]).transpose(1, 2)
    mo, ml = sdpa.merge_states(out_parts, lse_parts)
    ref, _ = TR.attention(qd, kd, vd)
    assert (mo.double() - ref[0]).abs().max() < 2e-2
    assert math.isfinite(ml.max().item())

"""The flash_attn / xformers drop-ins, one test per cause the upstream suites
found: the grouped 5-D layout (and its refusals), a stride-0 leaf bias'
gradient, empty problems, one-head inputs with a tensor bias, the bias
objects' API, padded-key and paged masks, the low-level xformers functions and
merge_attentions, rotary tables in q's dtype, cache_leftpad and flash_attn's
rotary positions, paged varlen, flash_attn's S_dmask form (dense and varlen),
and the companion distributions that install the import names. Every value is
checked against the float64 torch reference (torch_reference.py). Each test
runs on the CPU backend and, where torch and libsdpa see a GPU, on CUDA."""
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numpy")

import sdpa  # noqa: E402
import torch_reference as TR  # noqa: E402
from sdpa import flash_attn_interface as fa  # noqa: E402
from sdpa import xformers_ops as xops  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


@pytest.fixture(autouse=True)
def _lib(request):
    try:
        sdpa.version()
    except Exception as e:  # pragma: no cover - no library built
        pytest.skip("libsdpa not loadable: %s" % e)


def _cuda_ok():
    try:
        return torch.cuda.is_available() and sdpa.cuda_available()
    except Exception:  # pragma: no cover - no library built
        return False


@pytest.fixture(params=["cpu", "cuda"])
def dev(request):
    if request.param == "cuda" and not _cuda_ok():
        pytest.skip("no CUDA device for torch and libsdpa")
    return request.param


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(g, dev, *shape):
    return torch.randn(*shape, generator=g).to(dev)


def _close(a, b, tol=2e-5):
    assert a.shape == b.shape, (a.shape, b.shape)
    if a.is_cuda:
        tol = max(tol, 2e-4)  # the CUDA fp32 kernels: 3xTF32 / SIMT accumulation order
    err = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    assert err <= tol, err


# ---- xformers: layouts -----------------------------------------------------------------------

def test_bmghk_per_head_kv_is_full_attention(dev):
    g = _gen(1)
    B, Mq, Mkv, G, H, K = 3, 13, 16, 1, 5, 32
    q = _randn(g, dev, B, Mq, G, H, K)
    k = _randn(g, dev, B, Mkv, G, H, K)
    v = _randn(g, dev, B, Mkv, G, H, K)
    out = xops.memory_efficient_attention(q, k, v)
    ref, _ = TR.attention(q[:, :, 0], k[:, :, 0], v[:, :, 0])
    _close(out[:, :, 0], ref)
    # two groups, k / v per head and expanded over H (GQA)
    G, H = 2, 3
    q = _randn(g, dev, B, Mq, G, H, K)
    k = _randn(g, dev, B, Mkv, G, H, K)
    v = _randn(g, dev, B, Mkv, G, H, K)
    out = xops.memory_efficient_attention(q, k, v)
    ref, _ = TR.attention(q.reshape(B, Mq, G * H, K), k.reshape(B, Mkv, G * H, K),
                          v.reshape(B, Mkv, G * H, K))
    _close(out.reshape(B, Mq, G * H, K), ref)
    ke, ve = k[:, :, :, :1].expand(-1, -1, -1, H, -1), v[:, :, :, :1].expand(-1, -1, -1, H, -1)
    out = xops.memory_efficient_attention(q, ke, ve)
    ref, _ = TR.attention(q.reshape(B, Mq, G * H, K), k[:, :, :, 0], v[:, :, :, 0])
    _close(out.reshape(B, Mq, G * H, K), ref)


def test_bmghk_layouts_it_cannot_fold_raise():
    B, Mq, Mkv, G, H, K = 2, 1, 8, 2, 4, 16
    q = torch.randn(B, Mq, G, H, K)
    kv = torch.randn(B, Mkv, H, G, K).permute(0, 1, 3, 2, 4)  # H outside G in memory
    with pytest.raises(ValueError):
        xops.memory_efficient_attention(q, kv, kv)
    kv = torch.randn(B, Mkv, G, 1, K)  # H = 1 where q has 4: a shape mismatch
    with pytest.raises(ValueError):
        xops.memory_efficient_attention(q, kv, kv)
    kv = torch.randn(B, Mkv, G, H, 2 * K)[..., :K]  # strided rows still fold
    out = xops.memory_efficient_attention(q, kv, kv)
    ref, _ = TR.attention(q.reshape(B, Mq, G * H, K), kv.reshape(B, Mkv, G * H, K),
                          kv.reshape(B, Mkv, G * H, K))
    _close(out.reshape(B, Mq, G * H, K), ref)


def test_block_diagonal_biases_move_every_tensor():
    """bias.to(device) moves the infos' tensors and the block tables, keeps the
    rest (window, page size), and is a no-op for infos already there."""
    bt = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    biases = [
        xops.BlockDiagonalMask.from_seqlens([2, 3], [4, 3]),
        xops.BlockDiagonalCausalLocalAttentionPaddedKeysMask.from_seqlens_local(
            [2, 3], 8, [4, 3], 2),
        xops.PagedBlockDiagonalPaddedKeysMask.from_seqlens([2, 3], [4, 3], bt, 16),
        xops.BlockDiagonalGappyKeysMask.from_seqlens([2, 3], [0, 5, 9], [4, 3]),
        xops.PagedBlockDiagonalGappyKeysMask.from_seqlens([2, 3], [1, 2], [4, 3], bt, 16),
    ]
    for b in biases:
        m = b.to("meta")
        assert type(m) is type(b)
        tensors = [m.q_seqinfo.seqstart, m.k_seqinfo.seqstart]
        tensors += [m.k_seqinfo.seqlen] if getattr(b.k_seqinfo, "seqlen", None) is not None else []
        tensors += [m.block_tables] if hasattr(b, "block_tables") else []
        assert all(t.device.type == "meta" for t in tensors)
        assert getattr(m, "_window_size", 2) == 2 and getattr(m, "page_size", 16) == 16
        assert b.to("cpu").k_seqinfo is b.k_seqinfo


def test_local_masks_refuse_an_empty_window():
    """Every mask of the last window_size keys refuses window_size <= 0, and
    the bottom-right block mask still checks that keys cover the queries."""
    makers = [
        lambda w: xops.LowerTriangularFromBottomRightLocalAttentionMask(w),
        lambda w: xops.BlockDiagonalMask.from_seqlens([2, 3], [2, 3]).make_local_attention(w),
        lambda w: xops.BlockDiagonalMask.from_seqlens(
            [2, 3], [4, 3]).make_local_attention_from_bottomright(w),
        lambda w: xops.BlockDiagonalCausalLocalAttentionPaddedKeysMask.from_seqlens_local(
            [2, 3], 8, [4, 3], w),
    ]
    for make in makers:
        assert make(2)._window == (1, 0)
        for w in (0, -1):
            with pytest.raises(ValueError):
                make(w)
    with pytest.raises(ValueError):  # block 1: 3 queries, 2 keys
        xops.BlockDiagonalMask.from_seqlens([2, 3], [4, 2]).make_local_attention_from_bottomright(2)


def test_packed_inputs_in_another_layout_raise():
    qkv = torch.randn(2, 5, 4, 3, 8)  # [b, s, h, 3, d]: not flash_attn's [b, s, 3, h, d]
    with pytest.raises(ValueError):
        fa.flash_attn_qkvpacked_func(qkv)
    with pytest.raises(ValueError):
        fa.flash_attn_kvpacked_func(torch.randn(2, 5, 4, 8), torch.randn(2, 5, 4, 2, 8))
    with pytest.raises(ValueError):
        fa.flash_attn_varlen_qkvpacked_func(torch.randn(10, 4, 3, 8),
                                            torch.tensor([0, 10], dtype=torch.int32), 10)
    with pytest.raises(ValueError):
        xops.merge_attentions(torch.randn(2, 1, 3, 4, 8), torch.randn(2, 1, 5, 3))


def test_bmk_inputs_with_a_tensor_bias(dev):
    g = _gen(2)
    B, M, N, K = 4, 9, 11, 16
    q, k, v = (_randn(g, dev, B, n, K) for n in (M, N, N))
    bias = _randn(g, dev, B, M, N).requires_grad_()
    out = xops.memory_efficient_attention(q, k, v, attn_bias=bias)
    ref, _ = TR.attention(q[:, :, None], k[:, :, None], v[:, :, None], bias=bias[:, None])
    _close(out, ref[:, :, 0])
    (gb,) = torch.autograd.grad(out.sum(), [bias])
    (rb,) = torch.autograd.grad(ref.sum(), [bias])
    _close(gb, rb)


# ---- bias gradients ----------------------------------------------------------------------------

def test_stride0_leaf_bias_gets_the_per_element_gradient(dev):
    g = _gen(3)
    b, h, s, d = 2, 3, 10, 16
    q, k, v = (_randn(g, dev, b, s, h, d) for _ in range(3))
    leaf = _randn(g, dev, b, 1, s, s).expand(b, h, s, s).requires_grad_()
    out = sdpa.torch_ops.attention(q, k, v, bias=leaf)
    ref, _ = TR.attention(q, k, v, bias=leaf)
    dout = _randn(g, dev, out.shape)
    (gb,) = torch.autograd.grad(out, [leaf], dout)
    (rb,) = torch.autograd.grad(ref, [leaf], dout.double())
    assert gb.shape == (b, h, s, s)
    _close(gb, rb)
    # an expanded parameter: autograd sums the broadcast dimension back
    param = _randn(g, dev, b, 1, s, s).requires_grad_()
    out = sdpa.torch_ops.attention(q, k, v, bias=param.expand(b, h, s, s))
    (gp,) = torch.autograd.grad(out, [param], dout)
    (rp,) = torch.autograd.grad(TR.attention(q, k, v, bias=param.expand(b, h, s, s))[0], [param],
                                dout.double())
    _close(gp, rp)


# ---- empty problems ------------------------------------------------------------------------------

@pytest.mark.parametrize("b,sq,sk", [(0, 5, 6), (2, 0, 6), (2, 5, 0), (2, 0, 0)])
def test_empty_problems_forward_and_backward(b, sq, sk, dev):
    g = _gen(4)
    q = _randn(g, dev, b, sq, 2, 8).requires_grad_()
    k = _randn(g, dev, b, sk, 2, 8).requires_grad_()
    v = _randn(g, dev, b, sk, 2, 8).requires_grad_()
    out, lse = sdpa.torch_ops.attention(q, k, v, return_lse=True)
    assert out.shape == (b, sq, 2, 8) and lse.shape == (b, 2, sq)
    if out.numel():
        assert torch.all(out == 0) and torch.all(lse == float("inf"))
    out.backward(torch.ones_like(out))
    for x in (q, k, v):
        assert x.grad.shape == x.shape and torch.all(x.grad == 0)
    # the drop-ins
    o = xops.memory_efficient_attention(q.detach(), k.detach(), v.detach())
    assert o.shape == (b, sq, 2, 8)
    o = fa.flash_attn_func(q.detach(), k.detach(), v.detach(), causal=True)
    assert o.shape == (b, sq, 2, 8)


def test_empty_problem_overwrites_poisoned_outputs(dev):
    q, k, v = (torch.randn(2, n, 2, 8, device=dev) for n in (4, 0, 0))
    out = torch.full((2, 4, 2, 8), float("nan"), device=dev)
    res = sdpa.forward(q, k, v, out=out, return_lse=True)
    assert torch.all(res[0] == 0) and torch.all(res[1] == float("inf"))


# ---- bias objects ----------------------------------------------------------------------------

def test_bias_objects_detach_backward_materialize():
    xops.LowerTriangularMask().detach()
    dense = torch.randn(16, 16, requires_grad=True)
    grad = torch.randn(16, 16)
    mb = xops.LowerTriangularMask().add_bias(dense)
    mb2 = mb.detach()
    mb.backward(grad)
    assert dense.grad is not None and mb2.grad is None
    _close(dense.grad, grad)
    # materialize broadcasts the mask against the tensor
    t = torch.randn(3, 2, 5, 7)
    m = xops.LowerTriangularMask().add_bias(t).materialize((1, 1, 5, 7))
    assert m.shape == (3, 2, 5, 7)
    _close(m.exp(), (t + xops.LowerTriangularMask().materialize((5, 7))).exp())


def test_block_diagonal_from_tensor_lists():
    qs = [torch.randn(1, 3, 1, 8), torch.randn(3, 2, 1, 8), torch.randn(1, 5, 1, 8)]
    bias, q = xops.BlockDiagonalMask.from_tensor_list(qs)
    dense = bias.materialize((14, 14))
    assert int((dense != -float("inf")).sum()) == 9 + 3 * 4 + 25
    for a, b in zip(qs, bias.split(q)):
        _close(a, b, 0)
    ks = [torch.randn(1, 4, 1, 8), torch.randn(3, 1, 1, 8), torch.randn(1, 2, 1, 8)]
    bias, q, k, v = xops.BlockDiagonalMask.from_tensor_lists_qkv(qs, ks, ks)
    out = xops.memory_efficient_attention(q, k, v, attn_bias=bias)
    for qi, ki, oi in zip(qs, ks, bias.split_queries(out)):
        _close(oi, TR.attention(qi, ki, ki)[0])


@pytest.mark.parametrize("kind", ["plain", "causal", "local"])
def test_padded_keys_masks(kind, dev):
    g = _gen(5)
    H, K, pad = 2, 16, 12
    ql, kl = [3, 1, 6], [5, 12, 7]
    if kind == "plain":
        bias = xops.BlockDiagonalPaddedKeysMask.from_seqlens(ql, pad, kl)
    elif kind == "causal":
        bias = xops.BlockDiagonalCausalWithOffsetPaddedKeysMask.from_seqlens(ql, pad, kl)
    else:
        bias = xops.BlockDiagonalCausalLocalAttentionPaddedKeysMask.from_seqlens_local(
            ql, pad, kl, 3)
    q = _randn(g, dev, 1, sum(ql), H, K)
    k = _randn(g, dev, 1, pad * len(kl), H, K)
    v = _randn(g, dev, 1, pad * len(kl), H, K)
    out = xops.memory_efficient_attention(q, k, v, attn_bias=bias)
    ref, _ = TR.attention(q, k, v, bias=bias.materialize((1, H, sum(ql), pad * len(kl)),
                                                         device=dev))
    _close(out, ref)


@pytest.mark.parametrize("mask", ["bottom_right_local", "block_local_bottom_right"])
def test_local_bottom_right_masks(mask, dev):
    g = _gen(6)
    H, K = 2, 16
    if mask == "bottom_right_local":
        bias = xops.LowerTriangularFromBottomRightMask().make_local_attention(4)
        q, k, v = (_randn(g, dev, 2, n, H, K) for n in (9, 13, 13))
        shape = (2, H, 9, 13)
    else:
        bias = xops.BlockDiagonalMask.from_seqlens([3, 5], [6, 5]) \
            .make_local_attention_from_bottomright(2)
        q, k, v = (_randn(g, dev, 1, n, H, K) for n in (8, 11, 11))
        shape = (1, H, 8, 11)
    out = xops.memory_efficient_attention(q, k, v, attn_bias=bias)
    ref, _ = TR.attention(q, k, v, bias=bias.materialize(shape, device=dev))
    _close(out, ref)


# ---- xformers functions ----------------------------------------------------------------------

def test_forward_requires_grad_and_backward_functions(dev):
    g = _gen(7)
    B, M, N, G, H, K = 2, 7, 9, 2, 2, 16
    q = _randn(g, dev, B, M, G, H, K)
    k = _randn(g, dev, B, N, G, H, K)
    v = _randn(g, dev, B, N, G, H, K)
    bias = xops.LowerTriangularFromBottomRightMask()
    out, lse = xops.memory_efficient_attention_forward_requires_grad(q, k, v, attn_bias=bias)
    ref, rlse = TR.attention(q.reshape(B, M, G * H, K), k.reshape(B, N, G * H, K),
                             v.reshape(B, N, G * H, K), causal=True)
    _close(out.reshape(B, M, G * H, K), ref)
    assert lse.shape == (B, G, H, M)
    _close(lse.reshape(B, G * H, M), rlse, 1e-4)
    grad = _randn(g, dev, out.shape)
    dq, dk, dv = xops.memory_efficient_attention_backward(grad, out, lse, q, k, v, attn_bias=bias)
    qr, kr, vr = (x.detach().clone().double().requires_grad_() for x in (q, k, v))
    o = xops.memory_efficient_attention(qr.float(), kr.float(), vr.float(), attn_bias=bias)
    o.backward(grad)
    for a, r in ((dq, qr.grad), (dk, kr.grad), (dv, vr.grad)):
        _close(a, r, 1e-4)
    with pytest.raises(NotImplementedError):
        xops.memory_efficient_attention_backward(grad, out, lse, q, k, v, p=0.1)
    with torch.enable_grad():
        o = xops.memory_efficient_attention_forward(q.requires_grad_(), k, v)
    assert o.grad_fn is None


@pytest.mark.parametrize("stack", [False, True])
def test_partial_and_merge_attentions_equal_the_whole(stack, dev):
    g = _gen(8)
    B, M, H, K = 2, 5, 3, 16
    q = _randn(g, dev, B, M, H, K)
    ks = [_randn(g, dev, B, n, H, K) for n in (4, 9, 1)]
    vs = [_randn(g, dev, B, n, H, K) for n in (4, 9, 1)]
    parts = [xops.memory_efficient_attention_partial(q, k, v) for k, v in zip(ks, vs)]
    attn, lse = [p[0] for p in parts], [p[1] for p in parts]
    if stack:
        attn, lse = torch.stack(attn), torch.stack(lse)
    out, lse_out = xops.merge_attentions(attn, lse)
    ref, rlse = TR.attention(q, torch.cat(ks, 1), torch.cat(vs, 1))
    _close(out, ref)
    _close(lse_out, rlse, 1e-4)
    out2, none = xops.merge_attentions(attn, lse, write_lse=False)
    assert none is None
    _close(out2, out, 0)


@pytest.mark.parametrize("varlen", [False, True])
def test_gradient_through_lse(varlen, dev):
    """lse feeds the loss: the library's backward takes its gradient (dlse)."""
    g = _gen(16)
    b, s, h, d = 2, 9, 3, 16
    q, k, v = (_randn(g, dev, b, s, h, d).requires_grad_() for _ in range(3))
    w_o, w_l = _randn(g, dev, b, s, h, d), _randn(g, dev, b, h, s)
    if varlen:  # one sequence per batch row, the same problem
        cu = torch.tensor([0, s, 2 * s], dtype=torch.int32, device=dev)
        out, lse = sdpa.torch_ops.attention(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1),
                                            causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                            max_seqlen_q=s, max_seqlen_k=s, return_lse=True)
        out, lse = out.unflatten(0, (b, s)), lse.unflatten(1, (b, s)).transpose(0, 1)
    else:
        out, lse = sdpa.torch_ops.attention(q, k, v, causal=True, return_lse=True)
    ref, rlse = TR.attention(q, k, v, causal=True)
    got = torch.autograd.grad((out * w_o).sum() + (lse * w_l).sum(), (q, k, v))
    want = torch.autograd.grad((ref * w_o.double()).sum() + (rlse * w_l.double()).sum(), (q, k, v))
    for a, r in zip(got, want):
        _close(a, r, 1e-4)


def test_merge_attentions_gradients_equal_the_whole(dev):
    g = _gen(17)
    B, M, H, K = 2, 5, 3, 16
    q = _randn(g, dev, B, M, H, K).requires_grad_()
    kv = [(_randn(g, dev, B, n, H, K).requires_grad_(), _randn(g, dev, B, n, H, K).requires_grad_())
          for n in (4, 7)]
    parts = [xops.memory_efficient_attention_partial(q, k, v) for k, v in kv]
    out, lse = xops.merge_attentions([p[0] for p in parts], [p[1] for p in parts])
    w_o, w_l = _randn(g, dev, *out.shape), _randn(g, dev, *lse.shape)
    leaves = (q,) + tuple(x for pair in kv for x in pair)
    got = torch.autograd.grad((out * w_o).sum() + (lse * w_l).sum(), leaves)
    ref, rlse = TR.attention(q, torch.cat([k for k, _ in kv], 1), torch.cat([v for _, v in kv], 1))
    want = torch.autograd.grad((ref * w_o.double()).sum() + (rlse * w_l.double()).sum(), leaves)
    for a, r in zip(got, want):
        _close(a, r, 1e-4)


# ---- flash_attn ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_kvcache_rotary_tables_in_q_dtype(dtype, dev):
    g = _gen(9)
    b, s_cache, h, d, rd = 2, 32, 2, 32, 16
    q = _randn(g, dev, b, 1, h, d).to(dtype)
    kc = _randn(g, dev, b, s_cache, h, d).to(dtype)
    vc = _randn(g, dev, b, s_cache, h, d).to(dtype)
    kn = _randn(g, dev, b, 1, h, d).to(dtype)
    vn = _randn(g, dev, b, 1, h, d).to(dtype)
    ang = torch.rand(s_cache, rd // 2, generator=g).to(dev) * 6
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)
    seqlens = torch.tensor([5, 17], dtype=torch.int32, device=dev)
    outs = []
    for c, s in ((cos, sin), (cos.float(), sin.float())):
        k1, v1 = kc.clone(), vc.clone()
        outs.append((fa.flash_attn_with_kvcache(q, k1, v1, kn, vn, rotary_cos=c, rotary_sin=s,
                                                cache_seqlens=seqlens, causal=True), k1))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def _normalize_like_flash_attn(s_dmask, q, k, causal, dropout):
    """flash_attn's tests' recovery of the probabilities from S_dmask: the test's
    own scores, the running block maxima from the last block down, exp(m - lse)."""
    qf, kf = q.double(), k.double()
    scores = torch.einsum("bthd,bshd->bhts", qf / qf.shape[-1] ** 0.5, kf)
    if causal:
        keep = TR.keep_mask(q.shape[1], k.shape[1], causal=True, device=q.device)
        scores = scores.masked_fill(~keep, float("-inf"))
    n = fa._get_block_size_n(q.device, q.shape[-1], dropout, causal)
    blocks = scores.split(n, dim=-1)
    lse = torch.logsumexp(torch.stack([torch.logsumexp(s, -1) for s in blocks], -1), -1)
    lse[lse == float("-inf")] = float("inf")
    bmax = torch.stack([s.amax(-1) for s in blocks], -1)
    run = torch.cummax(bmax.flip(-1), dim=-1).values.flip(-1).unbind(-1)
    return torch.cat([a * torch.exp(m - lse)[..., None]
                      for a, m in zip(s_dmask.double().split(n, dim=-1), run)], -1)


@pytest.mark.parametrize("causal,spread,d", [(False, 1.0, 64), (True, 1.0, 64), (True, 14.0, 59)])
def test_s_dmask_is_flash_attn_form(causal, spread, d, dev):
    """spread 14: scores so wide that some probabilities are denormal floats
    (d 59 on CUDA: the SIMT row's expf keeps them)."""
    g = _gen(10)
    b, s, h = 2, 150, 2
    q, k, v = (_randn(g, dev, b, s, h, d) for _ in range(3))
    q = q * spread
    out, lse, s_dmask = fa.flash_attn_func(q, k, v, dropout_p=0.2, causal=causal,
                                           return_attn_probs=True)
    assert s_dmask.shape == (b, h, s, s)
    probs = sdpa.forward(q, k, v, causal=causal, return_probs=True)[2]
    ref = torch.softmax(torch.einsum("bthd,bshd->bhts", q.double(), k.double()) / d ** 0.5
                        + torch.where(TR.keep_mask(s, s, causal=causal, device=dev), 0.0,
                                      float("-inf")), -1)
    assert torch.isfinite(s_dmask).all()
    attn = _normalize_like_flash_attn(s_dmask.abs(), q, k, causal, True)
    _close(attn, ref, 1e-5)
    kept = s_dmask >= 0
    frac = 1 - kept[ref > 0].float().mean().item()
    assert abs(frac - 0.2) < 0.02
    assert probs.shape == s_dmask.shape


def _rotate(x, cos, sin, pos, interleaved):
    """x [..., d] rotated at integer positions pos (broadcast over x's leading dims)."""
    rd = cos.shape[-1] * 2
    c, s_ = cos[pos].double(), sin[pos].double()
    x = x.double().clone()
    if interleaved:
        a, b = x[..., 0:rd:2].clone(), x[..., 1:rd:2].clone()
        x[..., 0:rd:2], x[..., 1:rd:2] = a * c - b * s_, a * s_ + b * c
    else:
        a, b = x[..., :rd // 2].clone(), x[..., rd // 2:rd].clone()
        x[..., :rd // 2], x[..., rd // 2:rd] = a * c - b * s_, a * s_ + b * c
    return x


@pytest.mark.parametrize("causal", [False, True])
def test_kvcache_leftpad_and_rotary_positions(causal, dev):
    """flash_attn's rules: keys cache_leftpad .. cache_seqlens + s_new - 1; k_new at
    cache_seqlens + i; q at cache_seqlens + i when causal (or local), else every
    row at cache_seqlens; positions are cache rows (leftpad shifts none)."""
    g = _gen(11)
    b, s_cache, h, hk, d, s_q, rd = 3, 40, 4, 2, 16, 5, 8
    q = _randn(g, dev, b, s_q, h, d)
    kc, vc = _randn(g, dev, b, s_cache, hk, d), _randn(g, dev, b, s_cache, hk, d)
    kn, vn = _randn(g, dev, b, s_q, hk, d), _randn(g, dev, b, s_q, hk, d)
    ang = torch.rand(s_cache, rd // 2, generator=g).to(dev) * 6
    cos, sin = ang.cos(), ang.sin()
    seqlens = torch.tensor([0, 9, 30], dtype=torch.int32, device=dev)
    leftpad = torch.tensor([0, 4, 30], dtype=torch.int32, device=dev)
    kc0, vc0 = kc.clone(), vc.clone()
    out = fa.flash_attn_with_kvcache(q, kc, vc, kn, vn, rotary_cos=cos, rotary_sin=sin,
                                     cache_seqlens=seqlens, cache_leftpad=leftpad, causal=causal,
                                     rotary_interleaved=False)
    for i in range(b):
        L, lp = int(seqlens[i]), int(leftpad[i])
        knr = _rotate(kn[i], cos, sin, torch.arange(L, L + s_q, device=dev)[:, None], False)
        keys = torch.cat([kc0[i, lp:L].double(), knr], 0)
        vals = torch.cat([vc0[i, lp:L], vn[i]], 0)
        qpos = torch.arange(L, L + s_q, device=dev) if causal else torch.full((s_q,), L, device=dev)
        qr = _rotate(q[i], cos, sin, qpos[:, None], False)
        ref, _ = TR.attention(qr[None], keys[None], vals[None], causal=causal)
        _close(out[i:i + 1], ref, 1e-4)
        _close(kc[i, L:L + s_q], knr.float(), 1e-5)


def test_paged_varlen_forward(dev):
    g = _gen(12)
    h, hk, d, ps = 4, 2, 32, 16
    lq, lk = [3, 1, 20], [17, 40, 20]
    n_pages = 12
    kp, vp = _randn(g, dev, n_pages, ps, hk, d), _randn(g, dev, n_pages, ps, hk, d)
    table = torch.randperm(n_pages, generator=g)[:9].reshape(3, 3).to(dev, torch.int32)
    cu_q = torch.tensor([0, 3, 4, 24], dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0, 17, 57, 77], dtype=torch.int32, device=dev)
    q = _randn(g, dev, sum(lq), h, d)
    out = fa.flash_attn_varlen_func(q, kp, vp, cu_q, cu_k, max(lq), max(lk), causal=True,
                                    block_table=table)
    for i in range(3):
        rows = torch.cat([kp[int(p)] for p in table[i]], 0)[:lk[i]]
        vrows = torch.cat([vp[int(p)] for p in table[i]], 0)[:lk[i]]
        qi = q[int(cu_q[i]):int(cu_q[i + 1])]
        ref, _ = TR.attention(qi[None], rows[None], vrows[None], causal=True)
        _close(out[int(cu_q[i]):int(cu_q[i + 1])][None], ref)


def test_xformers_paged_mask(dev):
    g = _gen(13)
    H, K, ps, pages_per_row = 2, 16, 16, 2
    ql, kl = [2, 5], [20, 9]
    table = torch.tensor([[3, 0], [1, 2]], dtype=torch.int32, device=dev)
    bias = xops.PagedBlockDiagonalCausalWithOffsetPaddedKeysMask.from_seqlens(
        ql, kl, block_tables=table, page_size=ps)
    q = _randn(g, dev, 1, sum(ql), H, K)
    k, v = _randn(g, dev, 1, 4 * ps, H, K), _randn(g, dev, 1, 4 * ps, H, K)
    out = xops.memory_efficient_attention(q, k, v, attn_bias=bias)
    ref, _ = TR.attention(q, k, v, bias=bias.materialize((1, H, sum(ql), 4 * ps), device=dev))
    _close(out, ref)


@pytest.mark.parametrize("kind", ["gappy", "gappy_causal", "paged_gappy", "paged"])
def test_gappy_and_paged_masks_forward_and_gradients(kind, dev):
    """Key blocks at any (overlapping) rows and in pages: forward on sdpa's paged
    varlen keys, gradients through the gathered rows; both against the float64
    reference over the materialized mask."""
    g = _gen(15)
    H, K, ps = 2, 16, 16
    ql = [2, 5, 1]
    table = torch.tensor([[3, 0], [1, 2], [5, 4]], dtype=torch.int32, device=dev)
    if kind.startswith("gappy"):
        cls = (xops.BlockDiagonalCausalWithOffsetGappyKeysMask if kind == "gappy_causal"
               else xops.BlockDiagonalGappyKeysMask)
        bias = cls.from_seqlens(ql, [5, 1, 30, 48], [10, 20, 3])
        n = 48
    elif kind == "paged_gappy":
        bias = xops.PagedBlockDiagonalGappyKeysMask.from_seqlens(ql, [3, 0, 10], [20, 9, 5],
                                                                 block_tables=table, page_size=ps)
        n = 6 * ps
    else:
        bias = xops.PagedBlockDiagonalPaddedKeysMask.from_seqlens(ql, [20, 9, 30], block_tables=table,
                                                                  page_size=ps)
        n = 6 * ps
    q = _randn(g, dev, 1, sum(ql), H, K).requires_grad_()
    k, v = _randn(g, dev, 1, n, H, K).requires_grad_(), _randn(g, dev, 1, n, H, K).requires_grad_()
    with torch.no_grad():
        out0 = xops.memory_efficient_attention(q, k, v, attn_bias=bias)
    out = xops.memory_efficient_attention(q, k, v, attn_bias=bias)
    dense = bias.materialize((1, H, sum(ql), n), device=dev)
    ref, _ = TR.attention(q, k, v, bias=dense)
    _close(out0, ref)
    _close(out, ref)
    grad = _randn(g, dev, *out.shape)
    got = torch.autograd.grad(out, (q, k, v), grad)
    want = torch.autograd.grad(ref, (q, k, v), grad.double())
    for a, b in zip(got, want):
        _close(a, b, 1e-4)
    # the low-level pair: forward_requires_grad's (out, lse), then the backward alone
    with torch.no_grad():
        out1, lse1 = xops.memory_efficient_attention_forward_requires_grad(q, k, v, attn_bias=bias)
        low = xops.memory_efficient_attention_backward(grad, out1, lse1, q, k, v, attn_bias=bias)
    for a, b in zip(low, want):
        _close(a, b, 1e-4)


def test_varlen_s_dmask_is_flash_attn_form(dev):
    g = _gen(14)
    h, d = 2, 64
    lens = [70, 5, 130]
    cu = torch.tensor([0, 70, 75, 205], dtype=torch.int32, device=dev)
    q, k, v = (_randn(g, dev, sum(lens), h, d) for _ in range(3))
    out, lse, s_dmask = fa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens),
                                                  dropout_p=0.2, causal=True,
                                                  return_attn_probs=True)
    assert s_dmask.shape == (3, h, max(lens), max(lens))
    for i, n in enumerate(lens):
        sl = slice(int(cu[i]), int(cu[i + 1]))
        qi, ki = q[sl][None], k[sl][None]
        ref = torch.softmax(torch.einsum("bthd,bshd->bhts", qi.double(), ki.double()) / d ** 0.5
                            + torch.where(TR.keep_mask(n, n, causal=True, device=dev), 0.0,
                                          float("-inf")), -1)
        attn = _normalize_like_flash_attn(s_dmask[i:i + 1, :, :n, :n].abs(), qi, ki, True, True)
        _close(attn, ref, 1e-5)
        assert torch.all(s_dmask[i, :, n:] == 0) and torch.all(s_dmask[i, :, :, n:] == 0)


# ---- installation ----------------------------------------------------------------------------

def test_companion_distributions_install_the_import_names(tmp_path):
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    site = tmp_path / "site"
    for name in ("flash_attn_shim", "xformers_shim"):
        src = tmp_path / name
        shutil.copytree(os.path.join(REPO, "python", name), src)
        r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "--no-build-isolation", "-w", str(tmp_path / "whl"), str(src)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    wheels = sorted(os.listdir(tmp_path / "whl"))
    assert [w.split("-")[0] for w in wheels] == ["sdpa_flash_attn", "sdpa_xformers"], wheels
    for w in wheels:
        zipfile.ZipFile(tmp_path / "whl" / w).extractall(site)
    code = ("import flash_attn, xformers.ops as xops, torch, sdpa.flash_attn_interface as F; "
            "from flash_attn import flash_attn_func; "
            "from xformers.ops import fmha; assert flash_attn_func is F.flash_attn_func; "
            "q = torch.randn(1, 4, 2, 8); "
            "o = xops.memory_efficient_attention(q, q, q, attn_bias=fmha.attn_bias."
            "LowerTriangularMask()); "
            "print(tuple(o.shape), flash_attn.__file__.startswith(%r))" % str(site))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.path.join(REPO, "python")]))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.split() == ["(1,", "4,", "2,", "8)", "True"], r.stderr

"""sdpa.distributed: the ctypes mirror of sdpa_ring.h, the split, and (with two or more
GPUs, NCCL and a libsdpa built with the ring) ring_attention over a torch.distributed
NCCL group: one process a GPU (torch.multiprocessing), out, lse and the gradients of q,
k, v against single-GPU sdpa on the gathered sequence.

Tolerance (test_gpu.py's rule with single-GPU sdpa as the low-precision yardstick):
max |ring - ref64| <= 2 * max |single - ref64| + atol, ref64 the float64 reference."""
import os
import tempfile

import pytest

import sdpa
from sdpa import SdpaError
from abi_layout import assert_abi_layout


def _lib_ok():
    try:
        sdpa.library_path()
        return True
    except OSError:
        return False


needs_lib = pytest.mark.skipif(not _lib_ok(), reason="libsdpa not loadable")


# ---- CPU: what CI checks ---------------------------------------------------------------------

def test_ring_abi_layout():
    """Every size and field offset of the ring's ctypes mirror equals the C compiler's."""
    from sdpa import distributed as D
    assert_abi_layout("sdpa_ring.h", [D.sdpa_ring, D.sdpa_ring_fwd_desc, D.sdpa_ring_bwd_desc])


@needs_lib
def test_shard_bounds_partition_the_sequence():
    from sdpa import distributed as D
    for world in (1, 2, 3, 4, 8):
        for n in (0, 1, 7, 64, 1001):
            for layout in ("zigzag", "contiguous"):
                rows = []
                for r in range(world):
                    b = D.shard_bounds(n, world, r, layout)
                    assert len(b) == (2 if layout == "zigzag" else 1)
                    assert all(a <= e for a, e in b)
                    if len(b) == 2:
                        assert b[0][1] <= b[1][0]  # local order is global order
                    rows += [i for a, e in b for i in range(a, e)]
                assert sorted(rows) == list(range(n))
    # 10 rows in 4 chunks: 3, 3, 2, 2
    assert D.shard_bounds(10, 2, 0) == [(0, 3), (8, 10)]
    assert D.shard_bounds(10, 2, 1, "zigzag") == [(3, 6), (6, 8)]
    with pytest.raises(SdpaError, match="rank = 2: expected 0 <= rank < world_size = 2"):
        D.shard_bounds(10, 2, 2)
    with pytest.raises(SdpaError, match="layout = 'diagonal'"):
        D.shard_bounds(10, 2, 0, "diagonal")


@needs_lib
def test_ring_attention_refuses_cpu_tensors():
    torch = pytest.importorskip("torch")
    from sdpa import distributed as D
    q = torch.zeros(1, 8, 2, 16)
    with pytest.raises(SdpaError, match="runs on CUDA tensors") as e:
        D.ring_attention(q, q, q, causal=True)
    assert e.value.status == sdpa.SDPA_ERR_NOT_SUPPORTED
    assert isinstance(D.available(), bool)


# ---- GPUs: one process a GPU -----------------------------------------------------------------

def _gpus():
    try:
        import torch
    except ImportError:
        return 0, "no torch"
    if not torch.cuda.is_available():
        return 0, "no CUDA device"
    if not _lib_ok():
        return 0, "libsdpa not loadable"
    from sdpa import distributed as D
    if not D.available():
        return 0, "libsdpa has no ring (CUDA and nccl.h at build time) or NCCL does not load"
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_nccl_available():
        return 0, "torch.distributed without NCCL"
    return torch.cuda.device_count(), ""


_NGPU, _WHY = _gpus()

# (layout, causal, b, s_total, h, h_k, d, dtype name, softcap, use lse in the loss)
CASES = [
    ("zigzag", True, 1, 1024, 4, 2, 128, "bfloat16", 0.0, False),
    ("zigzag", True, 2, 517, 4, 4, 64, "float16", 0.0, False),
    ("contiguous", True, 1, 640, 4, 1, 128, "bfloat16", 0.0, False),
    ("zigzag", False, 1, 600, 4, 2, 64, "bfloat16", 0.0, False),
    ("zigzag", True, 1, 384, 2, 1, 64, "bfloat16", 30.0, True),
]


def _close(got, ref64, single, atol, what):
    import torch
    got, single = got.double(), single.double()
    bound = 2 * (single - ref64).abs().max().item() + atol * max(1.0, ref64.abs().max().item())
    err = (got - ref64).abs().max().item()
    assert torch.isfinite(got).all(), "%s: not finite" % what
    assert err <= bound, "%s: max err %.3g > bound %.3g" % (what, err, bound)


def _worker(rank, world, init_file, results):
    import torch
    import torch.distributed as dist
    import torch_reference as TR
    from sdpa import distributed as D
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="file://" + init_file, rank=rank,
                            world_size=world)
    failures = []
    try:
        for i, (layout, causal, b, s, h, hk, d, dt, softcap, use_lse) in enumerate(CASES):
            dtype = getattr(torch, dt)
            g = torch.Generator(device="cuda").manual_seed(1234 + i)
            mk = lambda *shape: torch.randn(*shape, generator=g, device="cuda", dtype=dtype)
            q, k, v = mk(b, s, h, d), mk(b, s, hk, d), mk(b, s, hk, d)
            dout, dlse = mk(b, s, h, d), torch.randn(b, h, s, generator=g, device="cuda")
            kw = dict(causal=causal, softcap=softcap)
            # the ring on this rank's rows
            ql, kl, vl = (D.shard(x, layout=layout).requires_grad_() for x in (q, k, v))
            out, lse = D.ring_attention(ql, kl, vl, layout=layout, seqlen=s, return_lse=True,
                                        **kw)
            loss = (out.float() * D.shard(dout, layout=layout).float()).sum()
            if use_lse:
                loss = loss + (lse * D.shard(dlse, layout=layout, dim=2)).sum()
            loss.backward()
            # single-GPU sdpa and the float64 reference on the whole sequence
            qs, ks, vs = (x.clone().requires_grad_() for x in (q, k, v))
            so, sl = sdpa.forward(qs, ks, vs, return_lse=True, **kw)
            sloss = (so.float() * dout.float()).sum() + ((sl * dlse).sum() if use_lse else 0)
            sloss.backward()
            qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
            ro, rl = TR.attention(qr, kr, vr, **kw)
            rloss = (ro * dout.double()).sum() + ((rl * dlse.double()).sum() if use_lse else 0)
            rloss.backward()
            atol = {torch.float16: 1e-3, torch.bfloat16: 4e-3}[dtype]
            sh = lambda x, dim=1: D.shard(x, layout=layout, dim=dim, seqlen=s)
            name = "case %d rank %d" % (i, rank)
            try:
                _close(out, sh(ro), sh(so), atol, name + " out")
                _close(lse, sh(rl, 2), sh(sl, 2), 1e-4, name + " lse")
                _close(ql.grad, sh(qr.grad), sh(qs.grad), atol, name + " dq")
                _close(kl.grad, sh(kr.grad), sh(ks.grad), atol, name + " dk")
                _close(vl.grad, sh(vr.grad), sh(vs.grad), atol, name + " dv")
                full = D.gather(out.detach(), layout=layout, seqlen=s)
                assert torch.equal(sh(full), out.detach()), name + ": gather(shard) differs"
            except AssertionError as e:
                failures.append(str(e))
        # a mismatch between ranks fails on every rank, none waits
        q = torch.zeros(1, 64, 2 if rank else 4, 64, device="cuda", dtype=torch.bfloat16)
        try:
            D.ring_attention(q, q[:, :, :2], q[:, :, :2], causal=True)
            failures.append("rank %d: a mismatch of h between ranks was not refused" % rank)
        except SdpaError as e:
            if "on rank 0 but" not in e.message:
                failures.append("rank %d: unexpected refusal: %s" % (rank, e.message))
    finally:
        results[rank] = failures
        D.destroy()
        dist.destroy_process_group()


def _spawn(world):
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as t:
        manager = mp.Manager()
        results = manager.dict()
        mp.spawn(_worker, args=(world, os.path.join(t, "init"), results), nprocs=world,
                 join=True)
        failures = [f for r in range(world) for f in results.get(r, ["rank %d: no result" % r])]
    assert not failures, "\n".join(failures)


@pytest.mark.skipif(_NGPU < 2, reason=_WHY or "fewer than 2 GPUs")
def test_ring_attention_2_gpus():
    _spawn(2)


@pytest.mark.skipif(_NGPU < 4, reason=_WHY or "fewer than 4 GPUs")
def test_ring_attention_4_gpus():
    _spawn(4)

"""Context parallelism on one host: sdpa's ring (sdpa.distributed.ring_attention over
NCCL) against the same per-GPU work on one GPU without transfers, and against torch's
own context parallelism (torch.distributed.tensor.experimental.context_parallel), in
one run. One process a GPU (torch.multiprocessing, no torchrun).

    python3 bench/ring_bench.py                       # 4 GPUs, s_total 128k / 256k / 512k
    python3 bench/ring_bench.py --world 2 --seqlens 65536 --ops fwd

Writes bench/results/<date>-<gpu>-ring.json (docs/design.md §8; the ops "ring_fwd" and
"ring_bwd"), one record per op and s_total, each with per-GPU TFLOP/s:
  sdpa               sdpa's ring, ring.check_peers off (no host wait a call)
  sdpa_ring_checked  the ring with its default agreement check (one all-gather a call)
  sdpa_local         single-GPU sdpa on the same per-GPU work: the attention calls of rank
                     r's ring steps, on its own rows, without transfers or merges (the mean
                     over ranks)
  torch_cp           torch's context_parallel (SDPA patched, its load-balanced causal
                     split); null with torch_cp_note saying why when it cannot run
and needed_gbps: the bytes a GPU sends a step over the local compute time of a step, the
bandwidth per GPU at which the transfers hide under the attention (docs/design.md §9); the
*_ms fields are the times (the slowest rank's; sdpa_local_ms the mean).
FLOPs are the whole problem's (causal: half of 4 b h s^2 d; backward 2.5 times the
forward) over the ranks.
"""
import argparse
import os
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (puts python/ on the path)


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--seqlens", default="131072,262144,524288")
    p.add_argument("--ops", default="fwd,bwd")
    p.add_argument("--b", type=int, default=1)
    p.add_argument("--h", type=int, default=32)
    p.add_argument("--h-k", type=int, default=8)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--layout", default="zigzag")
    p.add_argument("--no-torch-cp", action="store_true")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--trials", type=int, default=3)
    return p.parse_args()


def time_ms(fn, args):
    return common.cuda_time_ms(fn, warmup=1, reps=args.reps, trials=args.trials)


def local_calls(args, q, k, v, rank, world):
    """The attention calls of this rank's ring steps (sdpa_ring_plan's, causal): step 0
    its own rows causally; then, per other rank, zigzag: its queries against that rank's
    first chunk (an earlier rank) or its second chunk against all of that rank's rows;
    contiguous: its queries against an earlier rank's rows. Returns [(q, k, v, causal)] on
    this rank's tensors (the same shapes; a block one row longer is cut to this rank's)."""
    from sdpa import distributed as D
    s = args.seqlen
    mine = D.shard_bounds(s, world, rank, args.layout)
    c0 = mine[0][1] - mine[0][0]
    calls = [(q, k, v, True)]
    for t in range(1, world):
        src = (rank - t) % world
        theirs = D.shard_bounds(s, world, src, args.layout)
        first = theirs[0][1] - theirs[0][0]
        n = sum(e - a for a, e in theirs)
        kk, vv = k[:, :min(n, k.shape[1])], v[:, :min(n, v.shape[1])]
        if args.layout == "contiguous":  # earlier ranks' blocks whole, later ones skipped
            if src < rank:
                calls.append((q, kk, vv, False))
        elif src < rank:
            calls.append((q, kk[:, :first], vv[:, :first], False))
        else:
            calls.append((q[:, c0:], kk, vv, False))
    return calls


def bench_sdpa(args, rank, world, op):
    import torch
    import sdpa
    from sdpa import distributed as D
    s_loc = sum(e - a for a, e in D.shard_bounds(args.seqlen, world, rank, args.layout))
    g = torch.Generator(device="cuda").manual_seed(rank)
    mk = lambda *sh: torch.randn(*sh, generator=g, device="cuda", dtype=torch.bfloat16)
    q, k, v = mk(args.b, s_loc, args.h, args.d), mk(args.b, s_loc, args.h_k, args.d), \
        mk(args.b, s_loc, args.h_k, args.d)
    res = {}
    for checked in (False, True):
        o = D._Opts(group=None, causal=True, scale=None, softcap=0.0, align="bottom-right",
                    window=(-1, -1), alibi_slopes=None, bias=None, dropout_p=0.0, seed=0,
                    offset=0, layout=args.layout, seqlen=args.seqlen, deterministic=False,
                    kernel=None, check_peers=checked)
        out, lse = D._forward(q, k, v, o)
        if op == "fwd":
            fn = lambda: D._forward(q, k, v, o)
        else:
            dout = torch.randn_like(out)
            fn = lambda: D._backward(dout, None, q, k, v, out, lse, o)
        torch.distributed.barrier()
        res["sdpa_ring_checked" if checked else "sdpa_ring"] = time_ms(fn, args)
    # the same attention calls on this GPU alone
    calls = local_calls(args, q, k, v, rank, world)
    prepared = []
    for qq, kk, vv, causal in calls:
        oo, ll = sdpa.forward(qq, kk, vv, causal=causal, return_lse=True)
        prepared.append((qq, kk, vv, causal, oo, ll, torch.randn_like(oo)))

    def run_local():
        for qq, kk, vv, causal, oo, ll, do in prepared:
            if op == "fwd":
                sdpa.forward(qq, kk, vv, causal=causal)
            else:
                sdpa.backward(do, qq, kk, vv, oo, ll, causal=causal)
    res["sdpa_local"] = time_ms(run_local, args)
    return res, s_loc


def bench_torch_cp(args, rank, world, op):
    """torch's context parallelism on the same problem: (ms, note)."""
    import torch
    import torch.nn.functional as F
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
    except ImportError as e:
        return None, "torch %s has no context_parallel (%s)" % (torch.__version__, e)
    mesh = init_device_mesh("cuda", (world,))
    g = torch.Generator(device="cuda").manual_seed(99)
    shape_q = (args.b, args.h, args.seqlen, args.d)
    shape_k = (args.b, args.h_k, args.seqlen, args.d)
    note = None
    for gqa in (True, False):
        try:
            q = torch.randn(*shape_q, generator=g, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(*shape_k, generator=g, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(*shape_k, generator=g, device="cuda", dtype=torch.bfloat16)
            if not gqa:  # the kv heads expanded to h: what torch users do without GQA
                k = k.repeat_interleave(args.h // args.h_k, dim=1)
                v = v.repeat_interleave(args.h // args.h_k, dim=1)
            bufs = [q, k, v]
            with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2],
                                  no_restore_buffers=set(bufs)):
                kw = {"is_causal": True}
                if gqa:
                    kw["enable_gqa"] = True
                if op == "fwd":
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, **kw)
                else:
                    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
                    out = F.scaled_dot_product_attention(qg, kg, vg, **kw)
                    dout = torch.randn_like(out)
                    fn = lambda: torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True)
                torch.distributed.barrier()
                ms = time_ms(fn, args)
            return ms, note
        except Exception as e:  # noqa: BLE001 - any failure is recorded, not fatal
            reason = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
            if gqa:
                note = "enable_gqa refused (%s); kv heads expanded to %d" % (reason, args.h)
                continue
            return None, (note + "; then " if note else "") + reason
    return None, note


def worker(rank, world, init_file, args, out):
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="file://" + init_file, rank=rank,
                            world_size=world)
    try:
        records = []
        for s in [int(x) for x in args.seqlens.split(",")]:
            args.seqlen = s
            for op in args.ops.split(","):
                res, s_loc = bench_sdpa(args, rank, world, op)
                cp_ms, cp_note = (None, "--no-torch-cp") if args.no_torch_cp else \
                    bench_torch_cp(args, rank, world, op)
                # the slowest rank sets the ring's pace; sdpa_local is the mean
                t = torch.tensor([res["sdpa_ring"], res["sdpa_ring_checked"], res["sdpa_local"],
                                  cp_ms if cp_ms is not None else float("nan")],
                                 device="cuda", dtype=torch.float64)
                mx, mean = t.clone(), t.clone()
                dist.all_reduce(mx, op=dist.ReduceOp.MAX)
                dist.all_reduce(mean, op=dist.ReduceOp.SUM)
                mean /= world
                per_gpu = common.flops(op, args.b, args.h, s, s, args.d, True) / world
                tf = lambda ms: None if ms != ms else round(per_gpu / (ms * 1e-3) / 1e12, 1)
                ms_ring, ms_checked, ms_local, ms_cp = mx[0].item(), mx[1].item(), \
                    mean[2].item(), mx[3].item()
                # a step's transfer: one block of K and V (bf16), and in the backward its
                # dK / dV (fp32); it hides under one step's local attention
                blk = args.b * s_loc * args.h_k * 2 * args.d * 2
                step_bytes = blk * (3 if op == "bwd" else 1)
                needed = step_bytes / (ms_local * 1e-3 / world) / 1e9
                rec = {"op": "ring_" + op, "dtype": "bf16", "b": args.b, "s_total": s,
                       "world": world, "layout": args.layout, "h": args.h, "h_k": args.h_k,
                       "d": args.d, "causal": True, "sdpa": tf(ms_ring),
                       "sdpa_ring_checked": tf(ms_checked), "sdpa_local": tf(ms_local),
                       "torch_cp": tf(ms_cp), "torch_cp_note": cp_note,
                       "needed_gbps": round(needed, 2), "sdpa_ms": round(ms_ring, 3),
                       "sdpa_ring_checked_ms": round(ms_checked, 3),
                       "sdpa_local_ms": round(ms_local, 3),
                       "torch_cp_ms": None if ms_cp != ms_cp else round(ms_cp, 3)}
                records.append(rec)
                if rank == 0:
                    print("%-8s s %7d: ring %s (checked %s), local %s, torch_cp %s TFLOP/s a GPU;"
                          " overlap needs %.1f GB/s a GPU%s"
                          % (rec["op"], s, rec["sdpa"], rec["sdpa_ring_checked"],
                             rec["sdpa_local"], rec["torch_cp"], needed,
                             "" if not cp_note else "  [torch_cp: %s]" % cp_note), flush=True)
                torch.cuda.synchronize()
        if rank == 0:
            out["records"] = records
            out["gpu"] = torch.cuda.get_device_name()
    except Exception:
        out["error_%d" % rank] = traceback.format_exc()
        raise
    finally:
        from sdpa import distributed as D
        D.destroy()
        dist.destroy_process_group()


def main():
    args = parse()
    import torch
    import torch.multiprocessing as mp
    if torch.cuda.device_count() < args.world:
        sys.exit("ring_bench: %d GPUs visible, --world %d" % (torch.cuda.device_count(),
                                                              args.world))
    with tempfile.TemporaryDirectory() as t:
        manager = mp.Manager()
        out = manager.dict()
        mp.spawn(worker, args=(args.world, os.path.join(t, "init"), args, out),
                 nprocs=args.world, join=True)
        out = dict(out)
    for k, v in out.items():
        if k.startswith("error_"):
            print(v, file=sys.stderr)
    if "records" not in out:
        sys.exit("ring_bench: no records")
    path = common.write_results(out["gpu"], out["records"], suffix="-ring",
                                extra={"world": args.world, "host": "one"})
    print("wrote", path)


if __name__ == "__main__":
    main()

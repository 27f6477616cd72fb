"""A/B of libsdpa builds over the benchmark's cells, in one process: forward and
backward (bf16, b*s = 16k, h*d = 2048, causal and not), with a bias, with
dropout and (the backward) deterministic, and decoding from a KV cache
(contiguous and paged in pages of 16, as CUDA graphs). Each cell's inputs are
made once; the builds are timed in turn, round after round, and each build's
figure is the median of its rounds.

  PYTHONPATH=python:bench python3 bench/ab_grid.py --libs base=path,new=path [--rounds 5]

Prints, per cell, each build's milliseconds and its ratio to the first build
(above 1: slower), and the largest ratio of each build; with --max-slowdown X
it exits 1 when a build is slower than the first by more than X (0.02: 2%) in
any cell.
"""
import argparse
import statistics
import sys

import torch

import common
import sdpa


def attn_cells(seqs, dims):
    """dims: "d" or "d/d_v" (MLA's 192/128) entries."""
    cells = []
    for dd in dims:
        d, dv = (int(x) for x in (dd.split("/") + [dd])[:2])
        for s in seqs:
            for causal in (False, True):
                cells.append(dict(d=d, dv=dv, s=s, causal=causal))
    return cells


def attn_case(d, dv, s, causal, op, extra):
    b, h = 16384 // s, 2048 // d
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, dd, device="cuda", dtype=torch.bfloat16) for dd in (d, d, dv))
    kw = dict(causal=causal)
    if extra == "bias":
        kw["bias"] = torch.randn(b, h, s, s, device="cuda", dtype=torch.bfloat16)
    if extra == "dropout":
        kw.update(dropout_p=0.1, seed=7)
    if op == "fwd":
        return lambda: sdpa.forward(q, k, v, **kw)
    out, lse = sdpa.forward(q, k, v, return_lse=True, **kw)
    do = torch.randn_like(out)
    if extra == "bias":
        kw["dbias"] = True
    if extra == "det":
        kw["deterministic"] = True
    return lambda: sdpa.backward(do, q, k, v, out, lse, **kw)


def decode_case(b, L, page):
    torch.manual_seed(0)
    h, h_k, d = 32, 8, 128
    q = torch.randn(b, 1, h, d, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(q)
    seqlens = torch.full((b,), L, device="cuda", dtype=torch.int32)
    kw = {}
    if page:
        n = b * L // page
        k = torch.randn(n, page, h_k, d, device="cuda", dtype=torch.bfloat16)
        kw["block_table"] = torch.randperm(n, device="cuda", dtype=torch.int32).view(b, L // page)
    else:
        k = torch.randn(b, L, h_k, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    return lambda: sdpa.forward(q, k, v, cache_seqlens=seqlens, out=out, **kw)


def graph_of(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return common.capture_graph(fn)


def time_cell(libs, make, rounds, graph):
    """Median ms of each build; make() gives the call (after use_library). An eager
    call runs on the library current when it runs: each build's is made current
    before its timing (a graph keeps the kernels it captured)."""
    runs, loaded = [], []
    for _, path in libs:
        loaded.append(common.use_library(path))
        fn = make()
        runs.append(graph_of(fn).replay if graph else fn)
    times = [[] for _ in libs]
    for r in range(rounds):
        for x in range(len(libs)):
            i = (r + x) % len(libs)
            common.use_loaded(loaded[i])
            times[i].append(common.cuda_time_ms(runs[i], warmup=2, reps=10, trials=1))
    return [statistics.median(t) for t in times]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--libs", required=True, help="name=path,...: ratios are to the first")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="s in {1024, 4096} only")
    ap.add_argument("--seqs", default="", help="comma-separated s of the attention cells "
                    "(default 1024,2048,4096,8192; --quick: 1024,4096)")
    ap.add_argument("--only", default="", help="comma-separated substrings: the cells naming one")
    ap.add_argument("--max-slowdown", type=float, default=None)
    ap.add_argument("--dims", default="64,128,256",
                    help="head dims of the attention cells (d, or d/d_v: 192/128)")
    ap.add_argument("--extras", default="plain,dropout,bias",
                    help="the attention cells' variants: plain, dropout, bias, det "
                    "(the backward's deterministic mode)")
    args = ap.parse_args()
    libs = common.parse_libs(args.libs)
    cells = []
    for op in ("fwd", "bwd"):
        seqs = ([int(x) for x in args.seqs.split(",")] if args.seqs
                else (1024, 4096) if args.quick else (1024, 2048, 4096, 8192))
        for c in attn_cells(seqs, args.dims.split(",")):
            for extra in ("", "dropout", "bias", "det"):
                if ((extra or "plain") not in args.extras.split(",")
                        or (op, extra) == ("fwd", "det")):
                    continue
                if extra in ("dropout", "bias") and (c["d"] == 256 or c["s"] > 4096):
                    continue
                dname = f"{c['d']}" + (f"/{c['dv']}" if c["dv"] != c["d"] else "")
                name = f"{op} d{dname} s{c['s']}{' causal' if c['causal'] else ''} {extra}".strip()
                cells.append((name, lambda c=c, op=op, extra=extra:
                              attn_case(c["d"], c["dv"], c["s"], c["causal"], op, extra), False))
    for b, L in ((1, 16384), (8, 4096), (32, 4096), (64, 16384)):
        for page in (0, 16):
            cells.append((f"decode b{b} s_k{L} page{page}",
                          lambda b=b, L=L, page=page: decode_case(b, L, page), True))
    if args.only:
        cells = [c for c in cells if any(x in c[0] for x in args.only.split(","))]
    worst = [1.0] * len(libs)
    print("cell | " + " | ".join(f"{n} ms (x)" for n, _ in libs))
    for name, make, graph in cells:
        ms = time_cell(libs, make, args.rounds, graph)
        ratios = [m / ms[0] for m in ms]
        worst = [max(w, r) for w, r in zip(worst, ratios)]
        print(name + " | " + " | ".join(f"{m:.4f} ({r:.3f})" for m, r in zip(ms, ratios)),
              flush=True)
    print("largest ratio to the first build: " +
          ", ".join(f"{n} {w:.3f}" for (n, _), w in zip(libs, worst)))
    if args.max_slowdown is not None and max(worst) > 1 + args.max_slowdown:
        sys.exit(1)


if __name__ == "__main__":
    main()

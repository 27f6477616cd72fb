"""GPU benchmark: sdpa against torch SDPA's FLASH, CUDNN and EFFICIENT backends
in one process, on the same inputs (DESIGN.md section 9).

Grid: bf16, d in {64, 128, 256}, s in {512 .. 16k} with b*s = 16k and
h*d = 2048, causal on and off. FLOPs: forward 4*b*h*s_q*s_k*d (halved when
causal); backward 2.5x that. Writes bench/results/<date>-<gpu>.json (schema of
DESIGN.md section 9) and a markdown table beside it, and prints the table.

  python3 bench/bench.py [--ops fwd,bwd] [--quick]
  python3 bench/bench.py --dropout P   the cost of dropout (suffix -dropout)
  python3 bench/bench.py --bias        forward with a full [b, h, s, s] bf16 bias
                                       (op fwd_bias, suffix -bias) against torch's
                                       EFFICIENT and CUDNN with it as attn_mask
"""
import argparse
import os
import sys

from common import cuda_time_ms, markdown_table, with_ratios, write_results

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import sdpa

TORCH_BACKENDS = {"torch_flash": SDPBackend.FLASH_ATTENTION,
                  "torch_cudnn": SDPBackend.CUDNN_ATTENTION,
                  "torch_efficient": SDPBackend.EFFICIENT_ATTENTION}


def flops(op, b, h, s_q, s_k, d, causal):
    f = 4.0 * b * h * s_q * s_k * d
    if causal:
        f /= 2
    return f * (2.5 if op == "bwd" else 1.0)


def bench_one(op, b, s, h, d, causal, dropout=0.0, bias=False):
    torch.manual_seed(0)
    # sdpa's layout is [b, s, h, d]; torch takes [b, h, s, d]: the same storage, transposed views.
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=op == "bwd")
    k = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=op == "bwd")
    v = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=op == "bwd")
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    rec = {"op": op, "dtype": "bf16", "b": b, "s_q": s, "s_k": s, "h": h, "h_k": h, "d": d,
           "causal": causal, "paged": 0, "dropout": dropout}
    fl = flops(op, b, h, s, s, d, causal)
    if bias:  # torch takes no mask with is_causal: the causal -inf goes into its copy
        rec["op"] = "fwd_bias"
        bt = torch.randn(b, h, s, s, device="cuda", dtype=torch.bfloat16)
        mask = bt
        if causal:
            tri = torch.ones(s, s, device="cuda", dtype=torch.bool).triu(1)
            mask = bt.masked_fill(tri, float("-inf"))

    def tflops(fn):
        try:
            ms = cuda_time_ms(fn)
            return fl / (ms * 1e-3) / 1e12
        except Exception as e:  # a backend that cannot run this problem
            print(f"  ({op} b={b} s={s} d={d} causal={causal}: {type(e).__name__}: {str(e)[:120]})",
                  file=sys.stderr)
            return None

    if bias:
        out = torch.empty_like(q)
        rec["sdpa"] = tflops(lambda: sdpa.forward(q, k, v, causal=causal, bias=bt, out=out))
        for name in ("torch_efficient", "torch_cudnn"):
            def run(be=TORCH_BACKENDS[name]):
                with sdpa_kernel(be):
                    F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask)
            rec[name] = tflops(run)
        rec["torch_flash"] = None  # FLASH takes no attn_mask
    elif op == "fwd":
        out = torch.empty_like(q)
        rec["sdpa"] = tflops(lambda: sdpa.forward(q, k, v, causal=causal, dropout_p=dropout,
                                                  seed=1, out=out))
        for name, be in TORCH_BACKENDS.items():
            def run(be=be):
                with sdpa_kernel(be):
                    F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, dropout_p=dropout)
            rec[name] = tflops(run)
    else:
        out, lse = sdpa.forward(q, k, v, causal=causal, return_lse=True)
        dout = torch.randn_like(out)
        rec["sdpa"] = tflops(lambda: sdpa.backward(dout, q, k, v, out, lse, causal=causal))
        for name, be in TORCH_BACKENDS.items():
            try:
                with sdpa_kernel(be):
                    o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            except Exception:
                rec[name] = None
                continue
            do = dout.transpose(1, 2)
            rec[name] = tflops(lambda o=o, do=do: torch.autograd.grad(o, (qt, kt, vt), do,
                                                                        retain_graph=True))
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="fwd")
    ap.add_argument("--quick", action="store_true", help="s in {1024, 4096} only")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="forward only: time these cells at p = 0 and at this p (the cost of dropout)")
    ap.add_argument("--bias", action="store_true",
                    help="forward with a full bf16 bias, s in {1024, 4096}")
    args = ap.parse_args()
    gpu = torch.cuda.get_device_name()
    seqs = [1024, 4096] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    records = []
    if args.dropout > 0:
        for d in (64, 128, 256):
            for causal in (False, True):
                pair = [bench_one("fwd", 4, 4096, 2048 // d, d, causal, p) for p in (0.0, args.dropout)]
                records.extend(pair)
                write_results(gpu, records, suffix="-dropout")
                print(f"dropout d={d} causal={int(causal)}: sdpa p=0 {pair[0]['sdpa']:.0f}, "
                      f"p={args.dropout} {pair[1]['sdpa']:.0f} ({pair[1]['sdpa'] / pair[0]['sdpa']:.2f}x); "
                      f"torch_flash {pair[0]['torch_flash'] or 0:.0f} -> {pair[1]['torch_flash'] or 0:.0f}",
                      flush=True)
        return
    if args.bias:
        for d in (64, 128, 256):
            for causal in (False, True):
                for s in (1024, 4096):
                    rec = bench_one("fwd", 16384 // s, s, 2048 // d, d, causal, bias=True)
                    records.append(rec)
                    write_results(gpu, records, suffix="-bias")
                    torch.cuda.empty_cache()
                    print(f"fwd_bias d={d} causal={int(causal)} s={s}: " + ", ".join(
                        f"{n}={rec.get(n) or 0:.0f}" for n in ("sdpa", "torch_efficient",
                                                              "torch_cudnn")), flush=True)
        cols = ["op", "d", "causal", "s_q", "b", "h", "sdpa", "torch_efficient", "torch_cudnn",
                "x_efficient", "x_cudnn"]
        table = markdown_table(with_ratios(records, others=("torch_efficient", "torch_cudnn")), cols)
        path = write_results(gpu, records, suffix="-bias")
        with open(path[:-5] + ".md", "w") as f:
            f.write(f"# {gpu}, TFLOP/s (bf16, full bias), x_* = sdpa / torch backend\n\n{table}\n")
        print(table)
        print("wrote", path)
        return
    for op in args.ops.split(","):
        for d in (64, 128, 256):
            for causal in (False, True):
                for s in seqs:
                    b, h = 16384 // s, 2048 // d
                    rec = bench_one(op, b, s, h, d, causal)
                    records.append(rec)
                    # rewritten after every cell: a run cut short keeps what it measured
                    write_results(gpu, records)
                    print(f"{op} d={d} causal={int(causal)} s={s}: " + ", ".join(
                        f"{n}={rec.get(n) or 0:.0f}" for n in ("sdpa", *TORCH_BACKENDS)), flush=True)
    cols = ["op", "d", "causal", "s_q", "b", "h", "sdpa", "torch_flash", "torch_cudnn",
            "torch_efficient", "x_flash", "x_cudnn"]
    table = markdown_table(with_ratios(records), cols)
    path = write_results(gpu, records)
    with open(path[:-5] + ".md", "w") as f:
        f.write(f"# {gpu}, TFLOP/s (bf16), x_* = sdpa / torch backend\n\n{table}\n")
    print(table)
    print("wrote", path)


if __name__ == "__main__":
    main()

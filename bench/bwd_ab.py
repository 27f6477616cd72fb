"""A/B of libsdpa builds on the d = 256 backward, in one process, against torch FLASH:
bf16, b*s = 16k, h = 8 (bench.py's grid), each cell timed build after build in rounds.

  PYTHONPATH=python:bench python3 bench/bwd_ab.py --libs name=path,name=path,...
        [--cells 0x1024,1x4096,...] (causal x s) [--modes plain,det,drop] [--rounds 2]
  ... bench/bwd_ab.py --once path   one backward call, b 4 s 4096 non-causal (for ncu)

Prints TFLOP/s (2.5x forward FLOPs) per build, the mean of the rounds (each in
brackets), x torch FLASH in mode plain, and each build's largest relative difference
from the first build's dq / dk / dv (rd; outputs NaN-filled before the call). out and
lse come from the first build's forward, so it must have the forward rows. det =
deterministic, drop = dropout 0.1. The library is swapped by common.use_library, as in
decode_probe.py --libs."""
import argparse
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F
from common import cuda_time_ms, parse_libs, use_library
import sdpa

D, H = 256, 8

def flops(b, s, causal):
    return 4.0 * b * H * s * s * D * (0.5 if causal else 1.0) * 2.5

def setup(s, causal):
    torch.manual_seed(0)
    b = 16384 // s
    q, k, v = (torch.randn(b, s, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out, lse = sdpa.forward(q, k, v, causal=causal, return_lse=True)
    dout = torch.randn_like(out)
    return b, q, k, v, out, lse, dout

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--libs", default="")
    ap.add_argument("--cells", default="0x1024,0x2048,0x4096,0x8192,1x1024,1x2048,1x4096,1x8192")
    ap.add_argument("--modes", default="plain")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--once", default="")
    a = ap.parse_args()
    if a.once:
        use_library(a.once)
        b, q, k, v, out, lse, dout = setup(4096, False)
        sdpa.backward(dout, q, k, v, out, lse)
        torch.cuda.synchronize()
        return
    libs = parse_libs(a.libs)
    for cell in a.cells.split(","):
        causal, s = (int(x) for x in cell.split("x"))
        use_library(libs[0][1])
        b, q, k, v, out, lse, dout = setup(s, bool(causal))
        fl = flops(b, s, causal)
        qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal))
        do = dout.transpose(1, 2)
        tf = lambda: torch.autograd.grad(o, (qt, kt, vt), do, retain_graph=True)
        for mode in a.modes.split(","):
            kw = {"causal": bool(causal), "deterministic": mode == "det",
                  "dropout_p": 0.1 if mode == "drop" else 0.0, "seed": 1}
            res = {n: [] for n, _ in libs}
            res["flash"] = []
            ref, diffs = None, {}
            bufs = [torch.empty_like(x) for x in (q, k, v)]
            for r in range(a.rounds):
                for n, path in libs:
                    use_library(path)
                    fn = lambda: sdpa.backward(dout, q, k, v, out, lse, dq=bufs[0], dk=bufs[1], dv=bufs[2], **kw)
                    if r == 0:
                        for x in bufs:
                            x.fill_(float("nan"))
                        fn()
                        g = [x.float() for x in bufs]
                        if ref is None:
                            ref = g
                        diffs[n] = max(((x - y).abs().max() / y.abs().max().clamp_min(1e-30)).item()
                                       for x, y in zip(g, ref))
                    res[n].append(fl / cuda_time_ms(fn) / 1e9)
                if mode == "plain":
                    res["flash"].append(fl / cuda_time_ms(tf) / 1e9)
            fla = sum(res["flash"]) / len(res["flash"]) if res["flash"] else None
            parts = []
            for n, _ in libs:
                m = sum(res[n]) / len(res[n])
                parts.append(f"{n}={m:.1f}" + (f"({m / fla:.3f}x)" if fla else "") +
                             "[" + "/".join(f"{x:.0f}" for x in res[n]) + "]" +
                             (f"(rd {diffs[n]:.1e})" if diffs[n] else ""))
            print(f"causal={causal} s={s} b={b} {mode}: " + " ".join(parts) +
                  (f" flash={fla:.1f}" if fla else ""), flush=True)

main()

#!/usr/bin/env python3
"""A short GPT training run, twice: attention through sdpa's flash_attn_func, then
through torch.nn.functional.scaled_dot_product_attention, from the same
initialisation on the same data. Prints both loss curves and the largest
relative difference of the losses.

    python tests/python/train_gpt.py [--steps 50] [--device cuda] [--json out.json]

Tiny model (4 layers, d_model 256, 8 query heads, 2 kv heads: GQA), bf16
autocast, causal, tokens drawn from a fixed random bigram chain (seeded), so the
loss falls and the two runs can be compared step by step.
"""
import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def attn_sdpa(q, k, v):
    from sdpa.flash_attn_interface import flash_attn_func
    return flash_attn_func(q, k, v, causal=True)  # [b, s, h, d] in and out


def attn_torch(q, k, v):
    h, hk = q.shape[2], k.shape[2]
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    try:
        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
    except TypeError:  # torch < 2.5: no enable_gqa
        kt = kt.repeat_interleave(h // hk, dim=1)
        vt = vt.repeat_interleave(h // hk, dim=1)
        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
    return o.transpose(1, 2)


class Block(nn.Module):
    def __init__(self, d, h, hk, attn):
        super().__init__()
        self.h, self.hk, self.hd = h, hk, d // h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, (h + 2 * hk) * self.hd, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.attn = attn

    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(self.ln1(x))
        q, k, v = qkv.split([self.h * self.hd, self.hk * self.hd, self.hk * self.hd], dim=-1)
        q = q.view(b, s, self.h, self.hd)
        k = k.view(b, s, self.hk, self.hd)
        v = v.view(b, s, self.hk, self.hd)
        o = self.attn(q, k, v).reshape(b, s, -1)
        x = x + self.proj(o)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, d, n_layer, h, hk, seq, attn):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, h, hk, attn) for _ in range(n_layer))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def make_data(steps, batch, seq, vocab, device, seed=1234):
    g = torch.Generator().manual_seed(seed)
    # a sparse random bigram chain: each token has 4 likely successors
    succ = torch.randint(0, vocab, (vocab, 4), generator=g)
    toks = torch.empty(steps, batch, seq + 1, dtype=torch.long)
    toks[:, :, 0] = torch.randint(0, vocab, (steps, batch), generator=g)
    for t in range(seq):
        choice = torch.randint(0, 4, (steps, batch), generator=g)
        noise = torch.rand(steps, batch, generator=g) < 0.1
        nxt = succ[toks[:, :, t], choice]
        rnd = torch.randint(0, vocab, (steps, batch), generator=g)
        toks[:, :, t + 1] = torch.where(noise, rnd, nxt)
    return toks.to(device)


def train(attn, data, args, device):
    torch.manual_seed(0)
    model = GPT(args.vocab, args.d_model, args.layers, args.heads, args.kv_heads, args.seq,
                attn).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    losses = []
    t0 = time.perf_counter()
    for step in range(args.steps):
        x, y = data[step, :, :-1], data[step, :, 1:]
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return losses, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", help="write both curves and the summary here")
    args = ap.parse_args()

    import sdpa
    print("sdpa %s (%s), torch %s, device %s" % (sdpa.version(), sdpa.library_path(),
                                                  torch.__version__, args.device))
    data = make_data(args.steps, args.batch, args.seq, args.vocab, args.device)
    l_sdpa, t_sdpa = train(attn_sdpa, data, args, args.device)
    l_torch, t_torch = train(attn_torch, data, args, args.device)

    print("%5s %12s %12s %10s" % ("step", "sdpa", "torch", "rel diff"))
    rel = []
    for i, (a, b) in enumerate(zip(l_sdpa, l_torch)):
        r = abs(a - b) / max(abs(b), 1e-12)
        rel.append(r)
        print("%5d %12.6f %12.6f %10.2e" % (i, a, b, r))
    worst = max(rel)
    print("final loss: sdpa %.6f, torch %.6f (start %.4f, log(vocab) %.4f)"
          % (l_sdpa[-1], l_torch[-1], l_sdpa[0], math.log(args.vocab)))
    print("largest relative difference of the losses: %.3e (step %d)" % (worst, rel.index(worst)))
    print("time: sdpa %.2f s, torch %.2f s (%d steps, includes warm-up)"
          % (t_sdpa, t_torch, args.steps))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sdpa": l_sdpa, "torch": l_torch, "max_rel_diff": worst,
                       "time_sdpa_s": t_sdpa, "time_torch_s": t_torch, "args": vars(args)}, f,
                      indent=1)
    ok = all(math.isfinite(x) for x in l_sdpa) and l_sdpa[-1] < l_sdpa[0]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

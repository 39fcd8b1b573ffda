"""A nanoGPT-style character model trained in an nn.Graph, ported from PyTorch by changing
the import: AdamW with weight-decay groups, warmup + cosine learning rate, gradient clipping
and dropout inside the compiled step, then save, export and sampling.

    python examples/nanogpt_graph_train.py [--steps 60] [--out ./nanogpt]

The text is a few lines in this file, so the script runs anywhere in seconds; point TEXT at
a real corpus (and raise the sizes) for a real model.
"""

import argparse
import math
import tempfile
from pathlib import Path

import numpy as np

import flowserve as torch  # the port: the rest of the script is PyTorch code
import flowserve.nn as nn
import flowserve.nn.functional as F

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n") * 8


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.attn_dropout, self.resid_dropout = nn.Dropout(dropout), nn.Dropout(dropout)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd),
                                 nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size=32, n_layer=2, n_head=4, n_embd=64, dropout=0.1):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd), wpe=nn.Embedding(block_size, n_embd), drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, dropout) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay, "clip_grad_max_norm": 1.0},
                  {"params": no_decay, "weight_decay": 0.0, "clip_grad_max_norm": 1.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
            logits = self(idx_cond)[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            idx = torch.cat((idx, torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)), dim=1)
        return idx


class TrainStep(nn.Graph):
    """One compiled step: forward, backward, gradient clipping (per parameter group), AdamW."""

    def __init__(self, model, optimizer, scheduler):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer, lr_sch=scheduler)

    def build(self, x, y):
        _, loss = self.model(x, y)
        loss.backward()
        return loss


def get_batch(data, block_size, batch_size, rng):
    ix = rng.integers(0, len(data) - block_size, batch_size)
    x = np.stack([data[i:i + block_size] for i in ix])
    y = np.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--out", default=None, help="directory for the saved graph (default: a temporary one)")
    args = parser.parse_args()
    torch.manual_seed(1337)
    rng = np.random.default_rng(1337)
    chars = sorted(set(TEXT))
    stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in TEXT], dtype=np.int64)

    model = GPT(len(chars))
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=1e-2, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler
    scheduler = sched.WarmUpLR(sched.CosineDecayLR(optimizer, decay_steps=args.steps, alpha=0.1),
                               warmup_factor=0.1, warmup_iters=max(1, args.steps // 10))
    step = TrainStep(model, optimizer, scheduler)
    for it in range(args.steps):
        loss = step(*get_batch(data, model.block_size, 8, rng))
        if it % 20 == 0 or it == args.steps - 1:
            print(f"step {it:4d}  loss {float(loss):.4f}  lr {scheduler.get_last_lr()[0]:.2e}")

    model.eval()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp()) / "nanogpt"

    class Forward(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, idx):
            return self.model(idx)

    forward = Forward()
    forward(get_batch(data, model.block_size, 2, rng)[0])
    torch.save(forward, out)
    print(f"saved the inference graph to {out} (flowserve export {out}; flowserve serve {out})")
    start = torch.tensor([[stoi["F"]]])
    sample = model.generate(start, 60, temperature=0.8, top_k=5)[0].tolist()
    print("sample:", repr("".join(chars[i] for i in sample)))


if __name__ == "__main__":
    main()

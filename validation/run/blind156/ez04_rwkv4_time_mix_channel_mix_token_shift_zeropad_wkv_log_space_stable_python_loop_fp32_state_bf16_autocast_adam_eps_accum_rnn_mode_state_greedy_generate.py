"""An RWKV-4 language model written by hand after BlinkDL's RWKV-LM (RWKV-v4/src/model.py and its
RNN-mode inference): token shift by nn.ZeroPad2d((0, 0, 1, -1)), time mixing with learned
mix_k/mix_v/mix_r, the WKV recurrence as a Python loop over time in fp32 with the numerically
stable state (aa, bb, pp: torch.maximum of the running exponent, two exps a step), sigmoid
receptance, channel mixing with squared ReLU; 6 layers 1,024 wide, vocabulary 50,277, LayerNorm
after the embedding (ln0). bf16 autocast over fp32 weights, Adam (betas 0.9/0.99, eps 1e-8) with
two micro-batches of 32 x 64 accumulated a step, 2 steps (each its own phase), a held-out loss at
batch 64 under no_grad, then RNN-mode greedy generation (the per-layer state of five (B, 1,024) fp32
tensors carried a token at a time) of 48 tokens for 48 prompts of 16 tokens under inference_mode;
5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15604)
if SMALL:
    V, D, LAYERS, B, T, ACCUM, EVAL_B, GEN_B, PROMPT, NEW = 128, 32, 2, 2, 16, 2, 2, 2, 4, 4
else:
    V, D, LAYERS, B, T, ACCUM, EVAL_B, GEN_B, PROMPT, NEW = 50277, 1024, 6, 32, 64, 2, 64, 48, 16, 48
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")


def wkv(time_decay, time_first, k, v):
    """The stable WKV recurrence over (B, T, C) fp32 keys and values."""
    b, t, c = k.shape
    w = -torch.exp(time_decay.float())
    u = time_first.float()
    aa = torch.zeros(b, c, device=k.device)
    bb = torch.zeros(b, c, device=k.device)
    pp = torch.full((b, c), -1e38, device=k.device)
    out = []
    for i in range(t):
        kk, vv = k[:, i], v[:, i]
        ww = u + kk
        p = torch.maximum(pp, ww)
        e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
        out.append((e1 * aa + e2 * vv) / (e1 * bb + e2))
        ww = w + pp
        p = torch.maximum(ww, kk)
        e1, e2 = torch.exp(ww - p), torch.exp(kk - p)
        aa, bb, pp = e1 * aa + e2 * vv, e1 * bb + e2, p
    return torch.stack(out, dim=1)


class TimeMix(nn.Module):
    def __init__(self, layer_id):
        super().__init__()
        ratio_0_to_1 = layer_id / max(LAYERS - 1, 1)
        ratio_1_to_almost0 = 1.0 - layer_id / LAYERS
        ddd = torch.arange(D).float() / D
        self.time_decay = nn.Parameter(-5 + 8 * (torch.arange(D) / (D - 1)) ** (0.7 + 1.3 * ratio_0_to_1))
        self.time_first = nn.Parameter(torch.ones(D) * 0.5 + ((torch.arange(D) + 1) % 3 - 1) * 0.5)
        self.time_mix_k = nn.Parameter(torch.pow(ddd, ratio_1_to_almost0).view(1, 1, D))
        self.time_mix_v = nn.Parameter(
            (torch.pow(ddd, ratio_1_to_almost0) + 0.3 * ratio_0_to_1).view(1, 1, D)
        )
        self.time_mix_r = nn.Parameter(torch.pow(ddd, 0.5 * ratio_1_to_almost0).view(1, 1, D))
        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.key = nn.Linear(D, D, bias=False)
        self.value = nn.Linear(D, D, bias=False)
        self.receptance = nn.Linear(D, D, bias=False)
        self.output = nn.Linear(D, D, bias=False)

    def forward(self, x):
        xx = self.time_shift(x)
        xk = x * self.time_mix_k + xx * (1 - self.time_mix_k)
        xv = x * self.time_mix_v + xx * (1 - self.time_mix_v)
        xr = x * self.time_mix_r + xx * (1 - self.time_mix_r)
        k, v = self.key(xk), self.value(xv)
        sr = torch.sigmoid(self.receptance(xr))
        y = wkv(self.time_decay, self.time_first, k.float(), v.float())
        return self.output(sr * y)

    def step(self, x, state):
        x_prev, aa, bb, pp = state
        xk = x * self.time_mix_k[0, 0] + x_prev * (1 - self.time_mix_k[0, 0])
        xv = x * self.time_mix_v[0, 0] + x_prev * (1 - self.time_mix_v[0, 0])
        xr = x * self.time_mix_r[0, 0] + x_prev * (1 - self.time_mix_r[0, 0])
        k, v = self.key(xk).float(), self.value(xv).float()
        r = torch.sigmoid(self.receptance(xr))
        ww = self.time_first + k
        p = torch.maximum(pp, ww)
        e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
        wkv_out = (e1 * aa + e2 * v) / (e1 * bb + e2)
        ww = pp - torch.exp(self.time_decay)
        p = torch.maximum(ww, k)
        e1, e2 = torch.exp(ww - p), torch.exp(k - p)
        return self.output(r * wkv_out), (x.float(), e1 * aa + e2 * v, e1 * bb + e2, p)


class ChannelMix(nn.Module):
    def __init__(self, layer_id):
        super().__init__()
        ratio_1_to_almost0 = 1.0 - layer_id / LAYERS
        ddd = torch.arange(D).float() / D
        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.time_mix_k = nn.Parameter(torch.pow(ddd, ratio_1_to_almost0).view(1, 1, D))
        self.time_mix_r = nn.Parameter(torch.pow(ddd, ratio_1_to_almost0).view(1, 1, D))
        self.key = nn.Linear(D, 4 * D, bias=False)
        self.receptance = nn.Linear(D, D, bias=False)
        self.value = nn.Linear(4 * D, D, bias=False)

    def forward(self, x, x_prev=None):
        xx = self.time_shift(x) if x_prev is None else x_prev
        mk, mr = (
            (self.time_mix_k, self.time_mix_r)
            if x_prev is None
            else (self.time_mix_k[0, 0], self.time_mix_r[0, 0])
        )
        xk = x * mk + xx * (1 - mk)
        xr = x * mr + xx * (1 - mr)
        k = torch.square(torch.relu(self.key(xk)))
        return torch.sigmoid(self.receptance(xr)) * self.value(k)


class Block(nn.Module):
    def __init__(self, layer_id):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.att, self.ffn = TimeMix(layer_id), ChannelMix(layer_id)

    def forward(self, x):
        x = x + self.att(self.ln1(x))
        return x + self.ffn(self.ln2(x))

    def step(self, x, state):
        att_state, ffn_prev = state
        a, att_state = self.att.step(self.ln1(x), att_state)
        x = x + a
        xn = self.ln2(x)
        x = x + self.ffn(xn, ffn_prev)
        return x, (att_state, xn.float())


class RWKV(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.ln0 = nn.LayerNorm(D)
        self.blocks = nn.ModuleList(Block(i) for i in range(LAYERS))
        self.ln_out = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.ln0(self.emb(idx))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_out(x))

    def init_state(self, b):
        z = lambda: torch.zeros(b, D, device=device)  # noqa: E731
        return [((z(), z(), z(), torch.full((b, D), -1e38, device=device)), z()) for _ in self.blocks]

    def step(self, tok, states):
        x = self.ln0(self.emb(tok))
        new = []
        for blk, st in zip(self.blocks, states):
            x, st = blk.step(x, st)
            new.append(st)
        return self.head(self.ln_out(x)), new


model = RWKV().to(device)
opt = torch.optim.Adam(model.parameters(), lr=6e-4, betas=(0.9, 0.99), eps=1e-8)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    for micro in range(ACCUM):
        ids = torch.randint(0, V, (B, T + 1), device=device)
        with torch.autocast(**amp):
            logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, V), ids[:, 1:].reshape(-1)) / ACCUM
        loss.backward()
    opt.step()
    opt.zero_grad()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item() * ACCUM:.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del logits, loss, ids
model.eval()
with torch.no_grad(), torch.autocast(**amp):
    ids = torch.randint(0, V, (EVAL_B, T + 1), device=device)
    val = F.cross_entropy(model(ids[:, :-1]).float().view(-1, V), ids[:, 1:].reshape(-1)).item()
if device == "cuda":
    print(f"val {val:.4f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode(), torch.autocast(**amp):
    prompt = torch.randint(0, V, (GEN_B, PROMPT), device=device)
    states = model.init_state(GEN_B)
    for i in range(PROMPT):
        logits, states = model.step(prompt[:, i], states)
    out = []
    for _ in range(NEW):
        tok = logits.float().argmax(dim=-1)
        out.append(tok)
        logits, states = model.step(tok, states)
    generated = torch.stack(out, dim=1).cpu()
if device == "cuda":
    print(
        f"generated {tuple(generated.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )

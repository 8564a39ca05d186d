"""Temporal Fusion Transformer written from the paper: gated residual networks (ELU, GLU gate,
LayerNorm) for static covariate encoders and variable selection over 12 past and 6 known-future
inputs (each embedded by its own linear layer), an LSTM encoder over 168 past steps and an LSTM
decoder over 24 future steps initialised from the static context, gated skip connections, static
enrichment, interpretable multi-head attention (shared value projection, heads averaged) under a
causal mask, position-wise GRN and a 3-quantile output with the pinball loss; fp16 autocast with
GradScaler, Adam with amsgrad, 3 training steps, then a batched forecast under no_grad with the
attention weights kept; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12106)
B = 16 if SMALL else 512
PAST, FUT = (24, 6) if SMALL else (168, 24)
N_PAST, N_FUT, N_STATIC, D, HEADS = 12, 6, 3, (32 if SMALL else 160), 4
QUANTILES = (0.1, 0.5, 0.9)
device = "cuda" if torch.cuda.is_available() else "cpu"


class GLU(nn.Module):
    def __init__(self, d_in, d):
        super().__init__()
        self.fc = nn.Linear(d_in, 2 * d)

    def forward(self, x):
        return F.glu(self.fc(x), dim=-1)


class GRN(nn.Module):
    def __init__(self, d_in, d, d_out=None, d_ctx=None, dropout=0.1):
        super().__init__()
        d_out = d_out or d
        self.skip = nn.Linear(d_in, d_out) if d_in != d_out else nn.Identity()
        self.fc1 = nn.Linear(d_in, d)
        self.ctx = nn.Linear(d_ctx, d, bias=False) if d_ctx else None
        self.fc2 = nn.Linear(d, d)
        self.drop = nn.Dropout(dropout)
        self.gate = GLU(d, d_out)
        self.norm = nn.LayerNorm(d_out)

    def forward(self, x, c=None):
        h = self.fc1(x)
        if c is not None:
            h = h + self.ctx(c)
        h = self.fc2(F.elu(h))
        return self.norm(self.skip(x) + self.gate(self.drop(h)))


class VariableSelection(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.embed = nn.ModuleList(nn.Linear(1, D) for _ in range(n))
        self.flat = GRN(n * D, D, n, d_ctx=D)
        self.grns = nn.ModuleList(GRN(D, D) for _ in range(n))

    def forward(self, x, ctx):
        emb = [e(x[..., i : i + 1]) for i, e in enumerate(self.embed)]
        c = ctx.unsqueeze(1).expand(-1, x.shape[1], -1)
        w = F.softmax(self.flat(torch.cat(emb, -1), c), dim=-1).unsqueeze(-2)
        proc = torch.stack([g(e) for g, e in zip(self.grns, emb, strict=False)], -1)
        return (proc * w).sum(-1), w


class InterpretableMHA(nn.Module):
    def __init__(self):
        super().__init__()
        self.dk = D // HEADS
        self.q = nn.ModuleList(nn.Linear(D, self.dk) for _ in range(HEADS))
        self.k = nn.ModuleList(nn.Linear(D, self.dk) for _ in range(HEADS))
        self.v = nn.Linear(D, self.dk)
        self.out = nn.Linear(self.dk, D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, mask):
        v = self.v(x)
        heads, attns = [], []
        for q, k in zip(self.q, self.k, strict=False):
            s = q(x) @ k(x).transpose(1, 2) / self.dk**0.5
            a = self.drop(F.softmax(s.masked_fill(mask, -1e4), dim=-1))
            heads.append(a @ v)
            attns.append(a)
        return self.out(torch.stack(heads).mean(0)), torch.stack(attns).mean(0)


class TFT(nn.Module):
    def __init__(self):
        super().__init__()
        self.static_emb = nn.ModuleList(nn.Embedding(100, D) for _ in range(N_STATIC))
        self.static_grn = GRN(N_STATIC * D, D)
        self.ctx = nn.ModuleList(GRN(D, D) for _ in range(4))
        self.vs_past = VariableSelection(N_PAST)
        self.vs_fut = VariableSelection(N_FUT)
        self.enc = nn.LSTM(D, D, batch_first=True)
        self.dec = nn.LSTM(D, D, batch_first=True)
        self.lstm_gate = GLU(D, D)
        self.lstm_norm = nn.LayerNorm(D)
        self.enrich = GRN(D, D, d_ctx=D)
        self.attn = InterpretableMHA()
        self.attn_gate = GLU(D, D)
        self.attn_norm = nn.LayerNorm(D)
        self.pos_grn = GRN(D, D)
        self.out_gate = GLU(D, D)
        self.out_norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, len(QUANTILES))

    def forward(self, static, past, fut):
        s = self.static_grn(torch.cat([e(static[:, i]) for i, e in enumerate(self.static_emb)], -1))
        c_sel, c_h, c_c, c_enr = (g(s) for g in self.ctx)
        xp, wp = self.vs_past(past, c_sel)
        xf, wf = self.vs_fut(fut, c_sel)
        hp, state = self.enc(xp, (c_h.unsqueeze(0).contiguous(), c_c.unsqueeze(0).contiguous()))
        hf, _ = self.dec(xf, state)
        x = torch.cat([xp, xf], 1)
        lstm = self.lstm_norm(x + self.lstm_gate(torch.cat([hp, hf], 1)))
        enriched = self.enrich(lstm, c_enr.unsqueeze(1).expand(-1, lstm.shape[1], -1))
        t = enriched.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=enriched.device), 1)
        a, attn = self.attn(enriched, mask)
        x = self.attn_norm(enriched + self.attn_gate(a))
        x = self.out_norm(lstm + self.out_gate(self.pos_grn(x)))
        return self.head(x[:, -FUT:]), attn, wp, wf


def quantile_loss(pred, y):
    q = torch.tensor(QUANTILES, device=pred.device)
    err = y.unsqueeze(-1) - pred.float()
    return torch.maximum(q * err, (q - 1) * err).mean()


model = TFT().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")


def batch(n):
    static = torch.randint(0, 100, (n, N_STATIC), device=device)
    past = torch.randn(n, PAST, N_PAST, device=device)
    fut = torch.randn(n, FUT, N_FUT, device=device)
    y = torch.randn(n, FUT, device=device)
    return static, past, fut, y


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    static, past, fut, y = batch(B)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        pred, attn, wp, wf = model(static, past, fut)
        loss = quantile_loss(pred, y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 0.01 * 100)
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del pred, attn, wp, wf, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    static, past, fut, y = batch(2 * B)
    pred, attn, wp, wf = model(static, past, fut)
    attn = attn.float().cpu()
if device == "cuda":
    print(
        f"forecast {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )

"""A Temporal Fusion Transformer (Lim et al. 2021) written by hand for multi-horizon quantile forecasting,
with PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128 set before torch is imported.

Inputs per sample: 4 static reals, 16 observed past variables over 168 steps, 8 known future variables over
the 168 + 24 steps. Every variable is embedded by its own Linear(1, 160); variable-selection networks (a
gated residual network per variable plus a GRN over the flattened embeddings giving softmax weights,
conditioned on a static context) pick past and future inputs; static covariate encoders (4 GRNs) give the
selection context, the LSTM's initial h and c, and the enrichment context; an nn.LSTM encoder over the past
and decoder over the future (hidden 160, starting from the encoder's state), a gated skip with LayerNorm,
static enrichment, nn.MultiheadAttention (4 heads) over all 192 positions with a causal float mask and
need_weights (the attention weights averaged over heads, as TFT interprets them), a position-wise GRN and a
Linear head of 7 quantiles on the 24 future steps; the quantile (pinball) loss over all quantiles. Phases:
5 steps of fp32 Adam at batch 256 with clip 1.0; no_grad evaluation at batch 512; 4 steps under fp16
autocast with GradScaler at batch 384; empty_cache() and inference_mode forecasts at batch 1,024. 4 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:128"

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(2295)
device = "cuda"
D, HEADS, ENC, DEC = 160, 4, 168, 24
N_STATIC, N_PAST, N_FUT = 4, 16, 8
QUANTILES = (0.02, 0.1, 0.25, 0.5, 0.75, 0.9, 0.98)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class GLU(nn.Module):
    def __init__(self, din, dout):
        super().__init__()
        self.fc = nn.Linear(din, 2 * dout)

    def forward(self, x):
        return F.glu(self.fc(x), dim=-1)


class GRN(nn.Module):
    def __init__(self, din, d, dout=None, context=False, dropout=0.1):
        super().__init__()
        dout = dout or d
        self.skip = nn.Linear(din, dout) if din != dout else None
        self.fc1 = nn.Linear(din, d)
        self.ctx = nn.Linear(D, d, bias=False) if context else None
        self.fc2 = nn.Linear(d, d)
        self.drop = nn.Dropout(dropout)
        self.glu = GLU(d, dout)
        self.norm = nn.LayerNorm(dout)

    def forward(self, x, c=None):
        res = x if self.skip is None else self.skip(x)
        h = self.fc1(x)
        if c is not None:
            h = h + self.ctx(c)
        h = self.drop(self.fc2(F.elu(h)))
        return self.norm(res + self.glu(h))


class VariableSelection(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.embed = nn.ModuleList(nn.Linear(1, D) for _ in range(n))
        self.grns = nn.ModuleList(GRN(D, D) for _ in range(n))
        self.flat = GRN(n * D, D, n, context=True)

    def forward(self, x, c):  # x [B, T, n], c [B, D]
        emb = [e(x[..., i:i + 1]) for i, e in enumerate(self.embed)]
        w = F.softmax(self.flat(torch.cat(emb, -1), c.unsqueeze(1)), dim=-1)  # [B, T, n]
        h = torch.stack([g(e) for g, e in zip(self.grns, emb)], dim=-1)  # [B, T, D, n]
        return (h * w.unsqueeze(-2)).sum(-1), w


class TFT(nn.Module):
    def __init__(self):
        super().__init__()
        self.static_embed = nn.Linear(N_STATIC, D)
        self.static_ctx = nn.ModuleList(GRN(D, D) for _ in range(4))  # selection, h, c, enrichment
        self.vs_past = VariableSelection(N_PAST + N_FUT)
        self.vs_fut = VariableSelection(N_FUT)
        self.encoder = nn.LSTM(D, D, batch_first=True)
        self.decoder = nn.LSTM(D, D, batch_first=True)
        self.lstm_gate = GLU(D, D)
        self.lstm_norm = nn.LayerNorm(D)
        self.enrich = GRN(D, D, context=True)
        self.attn = nn.MultiheadAttention(D, HEADS, dropout=0.1, batch_first=True)
        self.attn_gate = GLU(D, D)
        self.attn_norm = nn.LayerNorm(D)
        self.pos_grn = GRN(D, D)
        self.out_gate = GLU(D, D)
        self.out_norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, len(QUANTILES))
        T = ENC + DEC
        self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1))

    def forward(self, static, past, known):
        s = self.static_embed(static)
        c_sel, c_h, c_c, c_enr = (g(s) for g in self.static_ctx)
        past_in, _ = self.vs_past(torch.cat([past, known[:, :ENC]], -1), c_sel)
        fut_in, _ = self.vs_fut(known[:, ENC:], c_sel)
        enc, state = self.encoder(past_in, (c_h.unsqueeze(0).contiguous(), c_c.unsqueeze(0).contiguous()))
        dec, _ = self.decoder(fut_in, state)
        lstm_out = torch.cat([enc, dec], 1)
        x_in = torch.cat([past_in, fut_in], 1)
        temporal = self.lstm_norm(x_in + self.lstm_gate(lstm_out))
        enriched = self.enrich(temporal, c_enr.unsqueeze(1))
        a, weights = self.attn(enriched, enriched, enriched, attn_mask=self.mask, need_weights=True)
        h = self.attn_norm(enriched + self.attn_gate(a))
        h = self.pos_grn(h)
        h = self.out_norm(temporal + self.out_gate(h))
        return self.head(h[:, ENC:]), weights


def quantile_loss(pred, target):
    q = torch.tensor(QUANTILES, device=pred.device, dtype=pred.dtype)
    diff = target.unsqueeze(-1) - pred
    return torch.maximum(q * diff, (q - 1) * diff).mean()


def data(b):
    static = torch.randn(b, N_STATIC, device=device)
    past = torch.randn(b, ENC, N_PAST, device=device)
    known = torch.randn(b, ENC + DEC, N_FUT, device=device)
    target = torch.randn(b, DEC, device=device)
    return static, past, known, target


model = TFT().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
print("tft params", sum(p.numel() for p in model.parameters()))
model.train()
for step in range(5):
    static, past, known, target = data(256)
    pred, _ = model(static, past, known)
    loss = quantile_loss(pred, target)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("step", step, loss.item())
report("train_fp32")

model.eval()
with torch.no_grad():
    static, past, known, target = data(512)
    pred, weights = model(static, past, known)
    print("eval loss", quantile_loss(pred, target).item(), "attn", tuple(weights.shape))
report("eval")

model.train()
scaler = torch.amp.GradScaler("cuda")
for step in range(4):
    static, past, known, target = data(384)
    with torch.autocast("cuda", dtype=torch.float16):
        pred, _ = model(static, past, known)
        loss = quantile_loss(pred.float(), target)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print("fp16 step", step, loss.item(), scaler.get_scale())
report("train_fp16")

del pred, loss, weights
torch.cuda.empty_cache()
model.eval()
with torch.inference_mode():
    static, past, known, target = data(1024)
    pred, weights = model(static, past, known)
    print("forecast", tuple(pred.shape), pred[..., 3].mean().item())
report("infer")

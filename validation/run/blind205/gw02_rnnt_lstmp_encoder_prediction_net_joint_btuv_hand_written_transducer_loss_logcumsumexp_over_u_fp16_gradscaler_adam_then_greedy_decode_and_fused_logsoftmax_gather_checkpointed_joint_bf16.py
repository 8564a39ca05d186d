"""An RNN-Transducer trained with a transducer loss written by hand.

Encoder: 80-dim log-mel frames (random), stacked 4 at a time (reshape, 40 ms hop), a Linear to 640 and a
4-layer unidirectional LSTM of 1024 with 320-dim projections (nn.LSTM(proj_size=320), cuDNN's LSTMP).
Prediction network: Embedding(1024 + 1, 320) over [blank] + labels and a 1-layer LSTM of 640.
Joint network: enc (B, T, 1, 512) + pred (B, 1, U + 1, 512), tanh, Linear(512, 1025): the (B, T, U + 1, V)
logits tensor, batch 24 x 200 frames x 61 label positions x 1025 outputs.

Loss: log_softmax over V, gather of the blank and label log-probabilities, then the forward variable
computed one frame at a time with the emissions along u folded in by an exclusive cumsum and
torch.logcumsumexp (alpha[t] = C + logcumsumexp(alpha[t-1] + blank[t-1] - C)), stacked, and gathered at
each utterance's (T_b - 1, U_b); mean of -log p / U_b.

Phases: the first step under fp16 autocast with GradScaler and single-tensor Adam (foreach=False); 3 more
steps; frame-synchronous greedy decoding under inference_mode (at most one symbol per frame, the
prediction network's state advanced with torch.where on non-blank); then a memory-lean variant: the
log-softmax never materialised (logits gathered minus torch.logsumexp), the joint and loss gathers run
per slice of 6 utterances under torch.utils.checkpoint, bf16 autocast and fused Adam, 3 steps. 4 phases."""

import os

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2052)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    B, FRAMES, U, V, HID, PROJ, JOINT = 3, 64, 9, 33, 64, 32, 48
else:
    B, FRAMES, U, V, HID, PROJ, JOINT = 24, 800, 60, 1025, 1024, 320, 512
BLANK = 0
T = FRAMES // 4


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Transducer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(80 * 4, 640)
        self.encoder = nn.LSTM(640, HID, num_layers=4, batch_first=True, proj_size=PROJ, dropout=0.1)
        self.enc_out = nn.Linear(PROJ, JOINT)
        self.embed = nn.Embedding(V, 320)
        self.predictor = nn.LSTM(320, 640, batch_first=True)
        self.pred_out = nn.Linear(640, JOINT)
        self.joint_out = nn.Linear(JOINT, V)

    def encode(self, feats):
        b, f, c = feats.shape
        x = self.inp(feats.reshape(b, f // 4, 4 * c))
        x, _ = self.encoder(x)
        return self.enc_out(x)

    def predict(self, labels):
        y = torch.cat([torch.full_like(labels[:, :1], BLANK), labels], dim=1)
        g, _ = self.predictor(self.embed(y))
        return self.pred_out(g)

    def joint(self, enc, pred):
        return self.joint_out(torch.tanh(enc.unsqueeze(2) + pred.unsqueeze(1)))


def transducer_nll(blank_lp, emit_lp, t_len, u_len):
    """blank_lp (B, T, U+1), emit_lp (B, T, U) log-probabilities in float32; returns -log p per utterance."""
    b, t_max, u1 = blank_lp.shape
    zero = emit_lp.new_zeros(b, t_max, 1)
    c = torch.cat([zero, emit_lp.cumsum(dim=2)], dim=2)  # exclusive cumsum of emissions along u
    alpha = c[:, 0]
    alphas = [alpha]
    for t in range(1, t_max):
        a = alpha + blank_lp[:, t - 1]
        alpha = c[:, t] + torch.logcumsumexp(a - c[:, t], dim=1)
        alphas.append(alpha)
    alphas = torch.stack(alphas, dim=1)
    idx_t = (t_len - 1).view(b, 1, 1).expand(b, 1, u1)
    last = alphas.gather(1, idx_t).squeeze(1)
    final = last + blank_lp.gather(1, idx_t).squeeze(1)
    return -final.gather(1, u_len.view(b, 1)).squeeze(1)


def lp_full(logits, labels):
    lp = logits.float().log_softmax(dim=-1)
    blank_lp = lp[..., BLANK]
    emit_lp = lp[:, :, :-1].gather(3, labels[:, None, :, None].expand(-1, lp.shape[1], -1, 1)).squeeze(3)
    return blank_lp, emit_lp


def lp_lean(enc, pred, labels):
    logits = model.joint(enc, pred)
    lse = torch.logsumexp(logits.float(), dim=-1)
    blank_lp = logits[..., BLANK].float() - lse
    emit = logits[:, :, :-1].gather(3, labels[:, None, :, None].expand(-1, logits.shape[1], -1, 1)).squeeze(3)
    return blank_lp, emit.float() - lse[:, :, :-1]


def make_batch():
    feats = torch.randn(B, FRAMES, 80, device=device)
    t_len = torch.randint(T // 2, T + 1, (B,), device=device)
    t_len[0] = T
    u_len = torch.randint(U // 3, U + 1, (B,), device=device)
    u_len[0] = U
    labels = torch.randint(1, V, (B, U), device=device)
    labels = labels.masked_fill(torch.arange(U, device=device)[None] >= u_len[:, None], BLANK)
    return feats, labels, t_len, u_len


model = Transducer().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.Adam(model.parameters(), lr=5e-4, foreach=False)
scaler = torch.amp.GradScaler("cuda", enabled=amp)


def fp16_step():
    feats, labels, t_len, u_len = make_batch()
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        enc = model.encode(feats)
        pred = model.predict(labels)
        logits = model.joint(enc, pred)
    blank_lp, emit_lp = lp_full(logits, labels)
    loss = (transducer_nll(blank_lp, emit_lp, t_len, u_len) / u_len).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"step 0 loss {fp16_step():.4f}")
report("first step")
for _ in range(3):
    loss = fp16_step()
print(f"step 3 loss {loss:.4f} scale {scaler.get_scale()}")
report("train fp16")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    feats, _, _, _ = make_batch()
    enc = model.encode(feats)
    token = torch.full((B, 1), BLANK, dtype=torch.long, device=device)
    g, (h, c) = model.predictor(model.embed(token))
    pred = model.pred_out(g[:, 0])
    hyp = torch.zeros(B, T, dtype=torch.long, device=device)
    for t in range(T):
        k = model.joint_out(torch.tanh(enc[:, t] + pred)).argmax(dim=-1)
        hyp[:, t] = k
        emitted = k != BLANK
        g2, (h2, c2) = model.predictor(model.embed(k[:, None]), (h, c))
        keep = emitted.view(1, B, 1)
        h = torch.where(keep, h2, h)
        c = torch.where(keep, c2, c)
        pred = torch.where(emitted[:, None], model.pred_out(g2[:, 0]), pred)
    print(f"greedy: {(hyp != BLANK).sum().item()} symbols over {B} utterances")
report("greedy decode")

del opt, scaler
opt = torch.optim.Adam(model.parameters(), lr=5e-4, fused=amp)
model.train()
SLICE = max(B // 4, 1)


def slice_nll(enc, pred, labels, t_len, u_len):
    blank_lp, emit_lp = lp_lean(enc, pred, labels)
    return transducer_nll(blank_lp, emit_lp, t_len, u_len)


for step in range(3):
    feats, labels, t_len, u_len = make_batch()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        enc = model.encode(feats)
        pred = model.predict(labels)
        nll = torch.cat(
            [
                checkpoint(
                    slice_nll,
                    enc[i : i + SLICE],
                    pred[i : i + SLICE],
                    labels[i : i + SLICE],
                    t_len[i : i + SLICE],
                    u_len[i : i + SLICE],
                    use_reentrant=False,
                )
                for i in range(0, B, SLICE)
            ]
        )
    loss = (nll / u_len).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"lean step {step} loss {loss.item():.4f}")
report("lean bf16")

"""The message-passing neural network of Gilmer et al. (2017, the edge-network variant) on
QM9-like molecules batched by padding instead of edge lists: up to 29 atoms a molecule (the
atom counts 9 to 29 from a seeded host generator, a node mask from `arange < count`), atom
features (one-hot element by `F.one_hot`, a few scalar features), a dense bond-type tensor
(B, N, N) made symmetric with no self bonds and masked to real atoms, the edge network mapping
each pair's bond one-hot and distance (from random 3-D coordinates by `torch.cdist`) to a 64 x 64
matrix, messages sum_j A_ij W(e_ij) h_j by one `einsum` over the padded pairs, a GRUCell update
over every padded atom (re-masked), 3 message steps with shared weights, Set2Set readout (an
LSTM of 3 processing steps, attention by a masked softmax over atoms), 12 regression targets
standardised; fp16 autocast with GradScaler, Adam with ReduceLROnPlateau stepped on the loss,
batch 128, 4 steps; then evaluation of 4 batches of 256 molecules under no_grad, and the same
model cast to bf16 weights for a second evaluation; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14104)
B, N_MAX, HID, N_ELEM, N_BOND = (8, 12, 16, 5, 4) if SMALL else (128, 29, 64, 5, 4)
T_MSG, S2S_STEPS, TARGETS = 3, 3, 12
STEPS, EVAL_B, EVAL_N = (2, 16, 2) if SMALL else (4, 256, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"
gen = torch.Generator().manual_seed(1404)


def make_batch(b):
    counts = torch.randint(max(3, N_MAX // 3), N_MAX + 1, (b,), generator=gen)
    mask = (torch.arange(N_MAX).unsqueeze(0) < counts.unsqueeze(1)).to(device)
    elem = torch.randint(0, N_ELEM, (b, N_MAX), device=device)
    scal = torch.randn(b, N_MAX, 6, device=device)
    x = torch.cat([F.one_hot(elem, N_ELEM).float(), scal], dim=-1) * mask.unsqueeze(-1)
    pos = torch.randn(b, N_MAX, 3, device=device) * 1.5
    dist = torch.cdist(pos, pos)
    bond = torch.randint(0, N_BOND + 1, (b, N_MAX, N_MAX), device=device)
    bond = torch.triu(bond, diagonal=1)
    bond = bond + bond.transpose(1, 2)
    pair_mask = mask.unsqueeze(1) & mask.unsqueeze(2)
    adj = ((bond > 0) & pair_mask).float()
    e = torch.cat([F.one_hot(bond, N_BOND + 1).float(), dist.unsqueeze(-1)], dim=-1)
    y = torch.randn(b, TARGETS, device=device)
    return x, adj, e, mask, y


class EdgeNetwork(nn.Module):
    def __init__(self, e_dim, hid):
        super().__init__()
        self.hid = hid
        self.net = nn.Sequential(nn.Linear(e_dim, 128), nn.ReLU(), nn.Linear(128, hid * hid))

    def forward(self, h, adj, e):
        b, n, _ = h.shape
        w = self.net(e).view(b, n, n, self.hid, self.hid)
        return torch.einsum("bij,bijkl,bjl->bik", adj, w, h)


class Set2Set(nn.Module):
    def __init__(self, hid, steps):
        super().__init__()
        self.steps = steps
        self.lstm = nn.LSTM(2 * hid, hid, batch_first=True)

    def forward(self, h, mask):
        b, _, d = h.shape
        q_star = h.new_zeros(b, 2 * d)
        state = None
        for _ in range(self.steps):
            q, state = self.lstm(q_star.unsqueeze(1), state)
            q = q.squeeze(1)
            att = (h * q.unsqueeze(1)).sum(-1).masked_fill(~mask, float("-inf"))
            a = torch.softmax(att, dim=1)
            r = (a.unsqueeze(-1) * h).sum(1)
            q_star = torch.cat([q, r], dim=-1)
        return q_star


class MPNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(N_ELEM + 6, HID)
        self.edge_net = EdgeNetwork(N_BOND + 2, HID)
        self.gru = nn.GRUCell(HID, HID)
        self.readout = Set2Set(HID, S2S_STEPS)
        self.out = nn.Sequential(nn.Linear(2 * HID, 256), nn.ReLU(), nn.Linear(256, TARGETS))

    def forward(self, x, adj, e, mask):
        b, n, _ = x.shape
        h = F.relu(self.embed(x)) * mask.unsqueeze(-1)
        for _ in range(T_MSG):
            m = self.edge_net(h, adj, e)
            h = self.gru(m.reshape(b * n, -1), h.reshape(b * n, -1)).view(b, n, -1) * mask.unsqueeze(-1)
        return self.out(self.readout(h, mask))


model = MPNN().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.7, patience=1)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
y_mean, y_std = torch.zeros(TARGETS, device=device), torch.ones(TARGETS, device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x, adj, e, mask, y = make_batch(B)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        pred = model(x, adj, e, mask)
        loss = F.mse_loss(pred.float(), (y - y_mean) / y_std)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step(loss.item())
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
del x, adj, e, mask, y, pred, loss
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

model.eval()
mae = torch.zeros(TARGETS, device=device)
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
    for _ in range(EVAL_N):
        x, adj, e, mask, y = make_batch(EVAL_B)
        mae += (model(x, adj, e, mask).float() * y_std + y_mean - y).abs().mean(0)
if device == "cuda":
    print(
        f"eval mae {(mae / EVAL_N).mean().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model.to(torch.bfloat16)
mae16 = torch.zeros(TARGETS, device=device)
with torch.no_grad():
    for _ in range(EVAL_N):
        x, adj, e, mask, y = make_batch(EVAL_B)
        pred = model(x.bfloat16(), adj.bfloat16(), e.bfloat16(), mask).float()
        mae16 += (pred * y_std + y_mean - y).abs().mean(0)
if device == "cuda":
    print(
        f"bf16 eval mae {(mae16 / EVAL_N).mean().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )

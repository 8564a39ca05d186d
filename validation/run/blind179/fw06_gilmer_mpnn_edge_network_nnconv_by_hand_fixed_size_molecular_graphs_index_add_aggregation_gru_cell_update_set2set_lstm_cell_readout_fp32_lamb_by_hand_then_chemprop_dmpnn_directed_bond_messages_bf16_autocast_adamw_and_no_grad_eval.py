"""Message passing over molecular graphs after Gilmer et al. 2017 ("Neural Message Passing for Quantum
Chemistry": the edge network of NNConv, a GRU update, Set2Set readout) and Chemprop's D-MPNN (Yang et
al. 2019, directed bond messages), written by hand with no graph library: batches of fixed-size
molecules (29 heavy atoms and 64 directed bonds each, QM9-like; the bond endpoints within each molecule
from seeded `torch.randint`, offset per molecule, flattened into one disconnected graph), atom features
(one-hot element of 5, degree 6, hybridization 4, aromatic, 11 more continuous: 27) and bond features
(one-hot type 4, conjugated, ring, 6 distance RBFs: 12). Part 1, the MPNN: atom embedding Linear(27, 128),
the edge network Linear(12, 128) -> ReLU -> Linear(128, 128 * 128) giving one 128 x 128 matrix per bond,
messages by torch.bmm of the source atoms' states with those matrices, aggregation by
`Tensor.index_add_` into the target atoms (mean by in-degree from another index_add_), nn.GRUCell update,
3 message-passing steps with shared weights, Set2Set readout with nn.LSTMCell over 3 processing steps
(attention over each molecule's atoms by a view of the fixed-size batch), 12 regression targets, MSE;
fp32 with LAMB written by hand (Adam moments, bias correction, weight decay 0.01, the per-tensor trust
ratio ||w|| / ||update||), batch 256 molecules; the first step its own phase, then 3 steps; then a
no_grad evaluation of 4 batches of 1,024 molecules (MAE per target). Part 2, Chemprop's D-MPNN: hidden
300, directed bond messages with the reverse-bond subtraction (incoming sums by index_add_ into atoms,
then gathered back to the bonds by their source atom, minus the reverse bond's message), depth 5,
atom outputs summed per molecule by index_add_, an FFN of 2 layers; bf16 autocast, AdamW (lr 1e-3) with
ExponentialLR, 3 steps at batch 2,048 molecules; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17906)
if SMALL:
    ATOMS, BONDS, H, B, STEPS, EVAL_B, EVAL_N, DM_H, DM_B = 5, 8, 16, 4, 2, 8, 1, 24, 8
else:
    ATOMS, BONDS, H, B, STEPS, EVAL_B, EVAL_N, DM_H, DM_B = 29, 64, 128, 256, 4, 1024, 4, 300, 2048
ATOM_F, BOND_F, NTARGET = 27, 12, 12
device = "cuda" if torch.cuda.is_available() else "cpu"


def molecules(n_mol):
    """A batch of n_mol fixed-size molecules flattened into one graph: bonds come in reverse pairs."""
    half = BONDS // 2
    a = torch.randint(0, ATOMS, (n_mol, half), device=device)
    b = (a + torch.randint(1, ATOMS, (n_mol, half), device=device)) % ATOMS
    offset = (torch.arange(n_mol, device=device) * ATOMS)[:, None]
    src = torch.cat([a, b], dim=1) + offset  # bond k and bond k + half are each other's reverse
    dst = torch.cat([b, a], dim=1) + offset
    elem = F.one_hot(torch.randint(0, 5, (n_mol * ATOMS,), device=device), 5)
    degree = F.one_hot(torch.randint(0, 6, (n_mol * ATOMS,), device=device), 6)
    hybrid = F.one_hot(torch.randint(0, 4, (n_mol * ATOMS,), device=device), 4)
    cont = torch.rand(n_mol * ATOMS, ATOM_F - 15, device=device)
    x = torch.cat([elem, degree, hybrid, cont], dim=1).float()
    btype = F.one_hot(torch.randint(0, 4, (n_mol * half,), device=device), 4).float()
    flags = (torch.rand(n_mol * half, 2, device=device) < 0.3).float()
    dist = 1.0 + torch.rand(n_mol * half, 1, device=device)
    rbf = torch.exp(-((dist - torch.linspace(1.0, 2.0, 6, device=device)) ** 2) / 0.1)
    e_half = torch.cat([btype, flags, rbf], dim=1).view(n_mol, half, BOND_F)
    e = torch.cat([e_half, e_half], dim=1).reshape(-1, BOND_F)
    y = torch.randn(n_mol, NTARGET, device=device)
    return x, e, src.reshape(-1), dst.reshape(-1), y


class MPNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin0 = nn.Linear(ATOM_F, H)
        self.edge_net = nn.Sequential(nn.Linear(BOND_F, 128), nn.ReLU(), nn.Linear(128, H * H))
        self.root = nn.Linear(H, H)
        self.gru = nn.GRUCell(H, H)
        self.lstm = nn.LSTMCell(2 * H, H)
        self.out = nn.Sequential(nn.Linear(2 * H, H), nn.ReLU(), nn.Linear(H, NTARGET))

    def forward(self, x, e, src, dst, n_mol):
        h = F.relu(self.lin0(x))
        w = self.edge_net(e).view(-1, H, H)
        deg = torch.zeros(h.shape[0], device=h.device).index_add_(0, dst, torch.ones_like(dst, dtype=h.dtype))
        for _ in range(3):
            msg = torch.bmm(h[src].unsqueeze(1), w).squeeze(1)
            agg = torch.zeros_like(h).index_add_(0, dst, msg) / deg.clamp(min=1).unsqueeze(1)
            m = F.relu(agg + self.root(h))
            h = self.gru(m, h)
        # Set2Set over the fixed-size molecules
        hm = h.view(n_mol, ATOMS, H)
        q_star = h.new_zeros(n_mol, 2 * H)
        state = (h.new_zeros(n_mol, H), h.new_zeros(n_mol, H))
        for _ in range(3):
            state = self.lstm(q_star, state)
            q = state[0]
            a = torch.softmax((hm * q.unsqueeze(1)).sum(-1), dim=1)
            r = (a.unsqueeze(-1) * hm).sum(1)
            q_star = torch.cat([q, r], dim=1)
        return self.out(q_star)


class LAMB(torch.optim.Optimizer):
    """LAMB (You et al. 2020) by hand as users copy it: Adam moments, then a layer-wise trust ratio."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                m_hat = exp_avg / (1 - beta1 ** state["step"])
                v_hat = exp_avg_sq / (1 - beta2 ** state["step"])
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                w_norm = p.norm(2)
                u_norm = update.norm(2)
                trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                p.add_(update * trust, alpha=-group["lr"])


model = MPNN().to(device)
print(f"mpnn params {sum(p.numel() for p in model.parameters())}")
optimizer = LAMB(model.parameters(), lr=2e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x, e, src, dst, y = molecules(B)
    pred = model(x, e, src, dst, B)
    loss = F.mse_loss(pred, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    print(f"mpnn step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del x, e, src, dst, y, pred, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
abs_err = torch.zeros(NTARGET, device=device)
with torch.no_grad():
    for _ in range(EVAL_N):
        x, e, src, dst, y = molecules(EVAL_B)
        abs_err += (model(x, e, src, dst, EVAL_B) - y).abs().sum(0)
print(f"eval mae {(abs_err / (EVAL_B * EVAL_N)).mean().item():.4f}")
del x, e, src, dst, y, abs_err, model, optimizer
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class DMPNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.W_i = nn.Linear(ATOM_F + BOND_F, DM_H, bias=False)
        self.W_h = nn.Linear(DM_H, DM_H, bias=False)
        self.W_o = nn.Linear(ATOM_F + DM_H, DM_H)
        self.drop = nn.Dropout(0.0)
        self.ffn = nn.Sequential(nn.Dropout(0.0), nn.Linear(DM_H, DM_H), nn.ReLU(), nn.Linear(DM_H, NTARGET))

    def forward(self, x, e, src, dst, n_mol):
        n_bonds = src.shape[0]
        half = BONDS // 2
        idx = torch.arange(n_bonds, device=x.device).view(n_mol, BONDS)
        rev = torch.cat([idx[:, half:], idx[:, :half]], dim=1).reshape(-1)
        inp = self.W_i(torch.cat([x[src], e], dim=1))
        msg = F.relu(inp)
        for _ in range(4):
            a_msg = torch.zeros(x.shape[0], DM_H, device=x.device, dtype=msg.dtype).index_add_(0, dst, msg)
            msg = a_msg[src] - msg[rev]
            msg = self.drop(F.relu(inp + self.W_h(msg)))
        a_msg = torch.zeros(x.shape[0], DM_H, device=x.device, dtype=msg.dtype).index_add_(0, dst, msg)
        atom_h = self.drop(F.relu(self.W_o(torch.cat([x.to(a_msg.dtype), a_msg], dim=1))))
        mol_index = torch.arange(n_mol, device=x.device).repeat_interleave(ATOMS)
        mol_h = torch.zeros(n_mol, DM_H, device=x.device, dtype=atom_h.dtype).index_add_(0, mol_index, atom_h)
        return self.ffn(mol_h / ATOMS)


dm = DMPNN().to(device)
dm_opt = torch.optim.AdamW(dm.parameters(), lr=1e-3, weight_decay=0.0)
sched = torch.optim.lr_scheduler.ExponentialLR(dm_opt, gamma=0.95)
print(f"dmpnn params {sum(p.numel() for p in dm.parameters())}")
for step in range(3):
    x, e, src, dst, y = molecules(DM_B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        pred = dm(x, e, src, dst, DM_B)
    loss = F.mse_loss(pred.float(), y)
    dm_opt.zero_grad()
    loss.backward()
    dm_opt.step()
    sched.step()
    print(f"dmpnn step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"dmpnn allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )

"""R2D2 (Kapturowski et al. 2019): recurrent experience replay in distributed RL, the learner and a
batch of actors on one GPU. The network is a Nature CNN over single 84 x 84 uint8 frames, an nn.LSTM of
512 (cuDNN) fed [features, one-hot previous action, previous reward], and a dueling head over 18
actions.

A sequence replay on the GPU, preallocated: 3,000 sequences of 120 steps (40 burn-in + 80 learning)
of uint8 frames, actions, rewards, dones, and the LSTM state stored at each sequence start. A learner
step samples 48 sequences by priority (torch.multinomial over 0.9 max + 0.1 mean |TD| to the 0.9),
burns in online and target LSTMs from the stored states for 40 steps under no_grad, unrolls the
remaining 80 steps, and trains double-Q 5-step targets with the invertible value rescaling
h(x) = sign(x)(sqrt(|x| + 1) - 1) + 1e-3 x; the new sequence priorities are written back by indexing.

Phases: 8 learner steps in fp32 with Adam (lr 1e-4, eps 1e-3, clip 40), the target copied every 4;
256 epsilon-greedy actors (per-actor epsilons 0.4^(1 + 7 i / 255)) stepping the LSTM one frame at a
time for 40 steps under inference_mode, their trajectory written into the replay by index_copy_; then
the actor tensors dropped, empty_cache(), and 6 learner steps under bf16 autocast with the CNN torso under
non-reentrant checkpointing and a fused Adam. 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2224)
device = "cuda" if torch.cuda.is_available() else "cpu"
CAP, BATCH, ACTORS = (64, 4, 8) if SMALL else (3000, 48, 256)
BURN, LEARN, NSTEP, GAMMA, ACTIONS, HID = 40, 80, 5, 0.997, 18, 512
SEQ = BURN + LEARN


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def h(x, eps=1e-3):
    return x.sign() * ((x.abs() + 1).sqrt() - 1) + eps * x


def h_inv(x, eps=1e-3):
    return x.sign() * ((((1 + 4 * eps * (x.abs() + 1 + eps)).sqrt() - 1) / (2 * eps)).square() - 1)


class R2D2Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.torso = nn.Sequential(
            nn.Conv2d(1, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(), nn.Conv2d(64, 64, 3, 1), nn.ReLU(),
            nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(),
        )
        self.lstm = nn.LSTM(512 + ACTIONS + 1, HID)
        self.adv = nn.Sequential(nn.Linear(HID, 512), nn.ReLU(), nn.Linear(512, ACTIONS))
        self.val = nn.Sequential(nn.Linear(HID, 512), nn.ReLU(), nn.Linear(512, 1))

    def encode(self, frames, use_checkpoint=False):
        x = frames.flatten(0, 1).unsqueeze(1).float() / 255.0
        feats = checkpoint(self.torso, x, use_reentrant=False) if use_checkpoint else self.torso(x)
        return feats.view(frames.shape[0], frames.shape[1], -1)

    def forward(self, frames, prev_a, prev_r, state, use_checkpoint=False):
        """frames (T, B, 84, 84) uint8; prev_a (T, B) long; prev_r (T, B); state (h, c) each (1, B, HID)."""
        feats = self.encode(frames, use_checkpoint)
        x = torch.cat([feats, F.one_hot(prev_a, ACTIONS).to(feats.dtype), prev_r.unsqueeze(-1).to(feats.dtype)], -1)
        out, state = self.lstm(x, state)
        adv = self.adv(out)
        return self.val(out) + adv - adv.mean(-1, keepdim=True), state


online, target = R2D2Net().to(device), R2D2Net().to(device)
target.load_state_dict(online.state_dict())
target.requires_grad_(False)

frames_buf = torch.randint(0, 256, (CAP, SEQ, 84, 84), dtype=torch.uint8, device=device)
act_buf = torch.randint(0, ACTIONS, (CAP, SEQ), device=device)
rew_buf = torch.randn(CAP, SEQ, device=device).clamp_(-1, 1)
done_buf = torch.rand(CAP, SEQ, device=device) < 0.005
h0_buf = torch.randn(CAP, HID, device=device) * 0.1
c0_buf = torch.randn(CAP, HID, device=device) * 0.1
prio_buf = torch.ones(CAP, device=device)
print("replay", frames_buf.numel() + 0, "bytes of frames")


def learner_step(opt, amp=False, use_checkpoint=False):
    idx = torch.multinomial(prio_buf.pow(0.9), BATCH, replacement=True)
    w = (CAP * prio_buf[idx] / prio_buf.sum()).pow(-0.6)
    w = w / w.max()
    frames = frames_buf[idx].transpose(0, 1)  # (SEQ, B, 84, 84)
    acts, rews, dones = act_buf[idx].t(), rew_buf[idx].t(), done_buf[idx].t().float()
    prev_a = torch.cat([torch.zeros_like(acts[:1]), acts[:-1]])
    prev_r = torch.cat([torch.zeros_like(rews[:1]), rews[:-1]])
    state = (h0_buf[idx][None], c0_buf[idx][None])
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        with torch.no_grad():
            _, s_online = online(frames[:BURN], prev_a[:BURN], prev_r[:BURN], state)
            _, s_target = target(frames[:BURN], prev_a[:BURN], prev_r[:BURN], state)
            q_tgt, _ = target(frames[BURN:], prev_a[BURN:], prev_r[BURN:], s_target)
        s_online = (s_online[0].detach(), s_online[1].detach())
        q, _ = online(frames[BURN:], prev_a[BURN:], prev_r[BURN:], s_online, use_checkpoint)
    q, q_tgt = q.float(), q_tgt.float()
    a_star = q.detach().argmax(-1, keepdim=True)
    boot = h_inv(q_tgt.gather(-1, a_star).squeeze(-1))  # (LEARN, B)
    r, d = rews[BURN:], dones[BURN:]
    L = LEARN - NSTEP
    ret = torch.zeros(L, BATCH, device=device)
    disc = torch.ones(L, BATCH, device=device)
    for k in range(NSTEP):
        ret = ret + disc * r[k : k + L]
        disc = disc * GAMMA * (1 - d[k : k + L])
    y = h(ret + disc * boot[NSTEP:])
    q_a = q[:L].gather(-1, acts[BURN : BURN + L].unsqueeze(-1)).squeeze(-1)
    td = y - q_a
    loss = (w * 0.5 * td.square().mean(0)).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(online.parameters(), 40.0)
    opt.step()
    abs_td = td.detach().abs()
    prio_buf[idx] = 0.9 * abs_td.amax(0) + 0.1 * abs_td.mean(0)
    return loss.detach()


opt = torch.optim.Adam(online.parameters(), lr=1e-4, eps=1e-3)
losses = []
for step in range(8):
    losses.append(learner_step(opt))
    if step % 4 == 3:
        target.load_state_dict(online.state_dict())
print("fp32 losses", torch.stack(losses)[[0, -1]].tolist())
report("learner fp32")

eps = 0.4 ** (1 + 7 * torch.arange(ACTORS, device=device) / (ACTORS - 1))
traj_frames = torch.empty(SEQ, ACTORS, 84, 84, dtype=torch.uint8, device=device)
traj_act = torch.zeros(SEQ, ACTORS, dtype=torch.long, device=device)
traj_rew = torch.zeros(SEQ, ACTORS, device=device)
state = (torch.zeros(1, ACTORS, HID, device=device), torch.zeros(1, ACTORS, HID, device=device))
start_h, start_c = state[0][0].clone(), state[1][0].clone()
frame = torch.randint(0, 256, (ACTORS, 84, 84), dtype=torch.uint8, device=device)
prev_a = torch.zeros(ACTORS, dtype=torch.long, device=device)
prev_r = torch.zeros(ACTORS, device=device)
with torch.inference_mode():
    for t in range(40):
        q, state = online(frame[None], prev_a[None], prev_r[None], state)
        greedy = q[0].argmax(-1)
        explore = torch.rand(ACTORS, device=device) < eps
        a = torch.where(explore, torch.randint(0, ACTIONS, (ACTORS,), device=device), greedy)
        traj_frames[t], traj_act[t] = frame, a
        prev_a, prev_r = a, torch.randn(ACTORS, device=device).clamp(-1, 1)
        traj_rew[t] = prev_r
        frame = torch.randint(0, 256, (ACTORS, 84, 84), dtype=torch.uint8, device=device)
    slots = torch.arange(ACTORS, device=device) % CAP
    frames_buf.index_copy_(0, slots, traj_frames.transpose(0, 1).contiguous())
    act_buf.index_copy_(0, slots, traj_act.t().contiguous())
    rew_buf.index_copy_(0, slots, traj_rew.t().contiguous())
    h0_buf.index_copy_(0, slots, start_h)
    c0_buf.index_copy_(0, slots, start_c)
    prio_buf.index_copy_(0, slots, prio_buf.max().expand(ACTORS))
print("actor q mean", q.float().mean().item())
report("actors inference_mode")

del traj_frames, traj_act, traj_rew, state, q, opt
if device == "cuda":
    torch.cuda.empty_cache()
opt = torch.optim.Adam(online.parameters(), lr=1e-4, eps=1e-3, fused=True)
losses = [learner_step(opt, amp=True, use_checkpoint=True) for _ in range(6)]
print("bf16 losses", torch.stack(losses)[[0, -1]].tolist())
report("learner bf16 checkpointed torso fused")

"""AlphaZero for 19 x 19 Go, the learner side written as in the AlphaGo Zero paper with a batched,
search-free self-play stand-in on the GPU: the policy-value ResNet (a 3x3 stem and 10 residual blocks of
128 channels with BatchNorm; a 2-channel policy head to 362 logits and a 1-channel value head through
256 to tanh) reads 17 feature planes (8 past positions of each colour and the side to move).

Self-play: 256 games in parallel under inference_mode; the root priors are mixed with Dirichlet(0.03)
noise (AlphaZero's exploration), illegal points masked with masked_fill, moves drawn with
torch.multinomial at temperature 1 and played by scatter_ into the boards, the history planes rolled;
every position goes into a preallocated GPU example buffer (uint8 planes, float policy targets, value
targets from the random game outcomes).

Phases: 24 self-play moves of 256 games; 10 SGD steps (momentum 0.9, weight decay 1e-4, lr 0.02) at
batch 512 in fp32 with a random dihedral symmetry per batch (rot90 and flips of planes and policy
targets), soft-target cross-entropy plus value MSE; an arena of the new network against a deepcopy of
the old one, 64 games for 20 moves under inference_mode; then 6 steps at batch 1024 in channels_last
under fp16 autocast with a GradScaler. 4 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2223)
device = "cuda" if torch.cuda.is_available() else "cpu"
N = 19
GAMES, BATCH, BIG_BATCH, BLOCKS, CH = (8, 16, 32, 2, 32) if SMALL else (256, 512, 1024, 10, 128)
MOVES, ARENA_GAMES, ARENA_MOVES = (6, 8, 4) if SMALL else (24, 64, 20)
CAP = 16384


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(x + self.b2(self.c2(y)))


class PolicyValueNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(17, CH, 3, padding=1, bias=False), nn.BatchNorm2d(CH), nn.ReLU())
        self.blocks = nn.Sequential(*[ResBlock(CH) for _ in range(BLOCKS)])
        self.pol = nn.Sequential(nn.Conv2d(CH, 2, 1, bias=False), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten())
        self.pol_fc = nn.Linear(2 * N * N, N * N + 1)
        self.val = nn.Sequential(nn.Conv2d(CH, 1, 1, bias=False), nn.BatchNorm2d(1), nn.ReLU(), nn.Flatten())
        self.val_fc = nn.Sequential(nn.Linear(N * N, 256), nn.ReLU(), nn.Linear(256, 1), nn.Tanh())

    def forward(self, planes):
        h = self.blocks(self.stem(planes))
        return self.pol_fc(self.pol(h)), self.val_fc(self.val(h)).squeeze(1)


def features(history, to_play):
    """history: (G, 16, 19, 19) int8 (8 black then 8 white planes); to_play: (G,) +1 black / -1 white."""
    colour = (to_play == 1).to(torch.uint8)[:, None, None, None].expand(-1, 1, N, N)
    return torch.cat([history.to(torch.uint8), colour], 1)


net = PolicyValueNet().to(device)
buf_planes = torch.zeros(CAP, 17, N, N, dtype=torch.uint8, device=device)
buf_pi = torch.zeros(CAP, N * N + 1, device=device)
buf_z = torch.zeros(CAP, device=device)
buf_size = 0


def play(nets, games, moves, store, noise=True):
    """Plays `games` boards for `moves` plies; nets alternate by move parity (one net: self-play)."""
    global buf_size
    board = torch.zeros(games, N * N + 1, dtype=torch.int8, device=device)  # the extra slot takes passes
    history = torch.zeros(games, 16, N, N, dtype=torch.int8, device=device)
    to_play = torch.ones(games, dtype=torch.long, device=device)
    dirichlet = torch.distributions.Dirichlet(torch.full((N * N + 1,), 0.03, device=device))
    with torch.inference_mode():
        for move in range(moves):
            planes = features(history, to_play)
            logits, value = nets[move % len(nets)](planes.float())
            legal = board == 0
            legal[:, -1] = True
            prior = logits.masked_fill(~legal, float("-inf")).softmax(-1)
            if noise:
                prior = 0.75 * prior + 0.25 * dirichlet.sample((games,)) * legal
            a = torch.multinomial(prior, 1)
            if store:
                n = games
                sl = slice(buf_size, buf_size + n)
                buf_planes[sl] = planes
                buf_pi[sl] = prior
                buf_size += n
            board.scatter_(1, a, to_play[:, None].to(torch.int8))
            board[:, -1] = 0
            stones = board[:, : N * N].view(games, N, N)
            history = torch.cat(
                [(stones == 1)[:, None].to(torch.int8), history[:, :7], (stones == -1)[:, None].to(torch.int8), history[:, 8:15]], 1
            )
            to_play = -to_play
    return board


nets_were_training = net.training
net.eval()
play([net], GAMES, MOVES, store=True)
net.train(nets_were_training)
buf_z[:buf_size] = torch.randint(0, 2, (buf_size,), device=device).float() * 2 - 1
print("examples", buf_size)
report("self-play inference_mode")


def dihedral(planes, pi, k, flip):
    board_pi, pass_pi = pi[:, : N * N].view(-1, N, N), pi[:, N * N :]
    planes, board_pi = torch.rot90(planes, k, (2, 3)), torch.rot90(board_pi, k, (1, 2))
    if flip:
        planes, board_pi = planes.flip(3), board_pi.flip(2)
    return planes, torch.cat([board_pi.reshape(-1, N * N), pass_pi], 1)


def train_step(model, opt, batch, scaler=None, channels_last=False):
    idx = torch.randint(0, buf_size, (batch,), device=device)
    k, flip = int(torch.randint(0, 4, ())), bool(torch.randint(0, 2, ()))
    planes, pi = dihedral(buf_planes[idx].float(), buf_pi[idx], k, flip)
    if channels_last:
        planes = planes.contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.float16, enabled=scaler is not None):
        logits, v = model(planes)
        loss = F.cross_entropy(logits.float(), pi) + F.mse_loss(v.float(), buf_z[idx])
    opt.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()
    return loss.detach()


old_net = copy.deepcopy(net)
opt = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)
losses = [train_step(net, opt, BATCH) for _ in range(10)]
print("fp32 losses", torch.stack(losses)[[0, -1]].tolist())
report("train fp32 sgd")

net.eval()
old_net.eval()
final = play([net, old_net], ARENA_GAMES, ARENA_MOVES, store=False, noise=False)
print("arena stones new/old", (final == 1).sum().item(), (final == -1).sum().item())
net.train()
report("arena inference_mode")

del old_net, opt
net = net.to(memory_format=torch.channels_last)
opt = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
losses = [train_step(net, opt, BIG_BATCH, scaler if device == "cuda" else None, channels_last=True) for _ in range(6)]
print("fp16 losses", torch.stack(losses)[[0, -1]].tolist(), "scale", scaler.get_scale() if device == "cuda" else None)
report("train fp16 gradscaler channels_last")

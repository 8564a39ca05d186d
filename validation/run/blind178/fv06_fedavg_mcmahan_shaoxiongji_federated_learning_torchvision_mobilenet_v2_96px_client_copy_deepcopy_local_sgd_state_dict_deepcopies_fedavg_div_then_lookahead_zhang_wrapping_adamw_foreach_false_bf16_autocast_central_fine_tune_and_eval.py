"""Federated averaging after McMahan et al. 2017 ("Communication-Efficient Learning of Deep Networks
from Decentralized Data") simulated in one process as the shaoxiongji/federated-learning repository
writes it (main_fed.py, models/Update.py LocalUpdate, models/Fed.py FedAvg), with torchvision's
mobilenet_v2 (10 classes, BatchNorm) at 96 x 96 instead of the repository's small CNN: each round,
for each of 6 clients, LocalUpdate.train(net=copy.deepcopy(net_glob)) trains the copy with its own
SGD (lr 0.01, momentum 0.5) for 2 local steps of batch 128 from that client's seeded CPU generator
and returns net.state_dict(), which is kept as copy.deepcopy(w) in w_locals (6 state_dicts on the
GPU at once); FedAvg deep-copies the first and adds the others key by key, then torch.div by the
count (num_batches_tracked too, as the repository does), and net_glob.load_state_dict(w_glob). fp32.
Two rounds, the global model evaluated after the first (4 batches of 512 under no_grad). Then a
central fine-tune of the global model with Lookahead after Zhang et al. 2019 as the
michaelrzhang/lookahead implementation writes it (cached slow weights by zeros_like + copy_ per
parameter, every k = 3 steps p.mul_(alpha).add_(cached, alpha=1 - alpha) and copy_ back, alpha 0.8)
wrapping AdamW(foreach=False, lr 1e-3), 6 steps of batch 256 under bf16 autocast, then the final
evaluation under inference_mode. Phases: round 1's clients; aggregation and evaluation; round 2
with its aggregation; the Lookahead fine-tune; the final evaluation: 5 phases."""

import copy
import os
from collections import defaultdict

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17806)
if SMALL:
    CLIENTS, LOCAL_STEPS, B, IMG, EVAL_N, EVAL_B, CB, CSTEPS = 2, 1, 4, 32, 1, 4, 4, 3
else:
    CLIENTS, LOCAL_STEPS, B, IMG, EVAL_N, EVAL_B, CB, CSTEPS = 6, 2, 128, 96, 4, 512, 256, 6
NUM_CLASSES = 10
device = "cuda" if torch.cuda.is_available() else "cpu"


class LocalUpdate:
    def __init__(self, client):
        self.gen = torch.Generator().manual_seed(17806 + 1000 * client)

    def train(self, net):
        net.train()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.5)
        epoch_loss = []
        for _ in range(LOCAL_STEPS):
            images = torch.randn(B, 3, IMG, IMG, generator=self.gen).to(device)
            labels = torch.randint(0, NUM_CLASSES, (B,), generator=self.gen).to(device)
            net.zero_grad()
            log_probs = net(images)
            loss = F.cross_entropy(log_probs, labels)
            loss.backward()
            optimizer.step()
            epoch_loss.append(loss.item())
        return net.state_dict(), sum(epoch_loss) / len(epoch_loss)


def FedAvg(w):
    w_avg = copy.deepcopy(w[0])
    for k in w_avg.keys():
        for i in range(1, len(w)):
            w_avg[k] += w[i][k]
        w_avg[k] = torch.div(w_avg[k], len(w))
    return w_avg


class Lookahead:
    def __init__(self, optimizer, la_steps=5, la_alpha=0.8):
        self.optimizer = optimizer
        self._la_step = 0
        self.la_alpha = la_alpha
        self._total_la_steps = la_steps
        self.state = defaultdict(dict)
        for group in optimizer.param_groups:
            for p in group["params"]:
                param_state = self.state[p]
                param_state["cached_params"] = torch.zeros_like(p.data)
                param_state["cached_params"].copy_(p.data)

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        loss = self.optimizer.step(closure)
        self._la_step += 1
        if self._la_step >= self._total_la_steps:
            self._la_step = 0
            for group in self.optimizer.param_groups:
                for p in group["params"]:
                    param_state = self.state[p]
                    p.data.mul_(self.la_alpha).add_(param_state["cached_params"], alpha=1.0 - self.la_alpha)
                    param_state["cached_params"].copy_(p.data)
        return loss


net_glob = torchvision.models.mobilenet_v2(num_classes=NUM_CLASSES).to(device)
net_glob.train()
eval_gen = torch.Generator().manual_seed(17806)
eval_batches = [
    (
        torch.randn(EVAL_B, 3, IMG, IMG, generator=eval_gen),
        torch.randint(0, NUM_CLASSES, (EVAL_B,), generator=eval_gen),
    )
    for _ in range(EVAL_N)
]
print(f"params {sum(p.numel() for p in net_glob.parameters())}")
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()


def run_round(rnd):
    w_locals, loss_locals = [], []
    for idx in range(CLIENTS):
        local = LocalUpdate(client=rnd * CLIENTS + idx)
        w, loss = local.train(net=copy.deepcopy(net_glob).to(device))
        w_locals.append(copy.deepcopy(w))
        loss_locals.append(loss)
    print(f"round {rnd} average loss {sum(loss_locals) / len(loss_locals):.4f}")
    return w_locals


def test_img(net, inference):
    net.eval()
    correct = 0
    loss = 0.0
    with torch.inference_mode() if inference else torch.no_grad():
        for images, labels in eval_batches:
            images, labels = images.to(device), labels.to(device)
            log_probs = net(images)
            loss += F.cross_entropy(log_probs, labels, reduction="sum").item()
            correct += (log_probs.argmax(dim=1) == labels).sum().item()
    n = EVAL_N * EVAL_B
    return 100.0 * correct / n, loss / n


w_locals = run_round(0)
if device == "cuda":
    print(f"round 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

w_glob = FedAvg(w_locals)
net_glob.load_state_dict(w_glob)
del w_locals
acc, loss = test_img(net_glob, inference=False)
print(f"after round 0 acc {acc:.2f} loss {loss:.4f}")
if device == "cuda":
    print(f"aggregate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

net_glob.train()
w_locals = run_round(1)
w_glob = FedAvg(w_locals)
net_glob.load_state_dict(w_glob)
del w_locals, w_glob
if device == "cuda":
    print(f"round 1 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

net_glob.train()
optimizer = Lookahead(
    torch.optim.AdamW(net_glob.parameters(), lr=1e-3, foreach=False), la_steps=3, la_alpha=0.8
)
central_gen = torch.Generator().manual_seed(17806 + 99)
for step in range(CSTEPS):
    images = torch.randn(CB, 3, IMG, IMG, generator=central_gen).to(device)
    labels = torch.randint(0, NUM_CLASSES, (CB,), generator=central_gen).to(device)
    optimizer.zero_grad()
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(net_glob(images), labels)
    loss.backward()
    optimizer.step()
    print(f"lookahead step {step} loss {loss.item():.4f}")
del images, labels, loss
if device == "cuda":
    print(f"lookahead peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

acc, loss = test_img(net_glob, inference=True)
print(f"final acc {acc:.2f} loss {loss:.4f}")
if device == "cuda":
    print(f"final eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")

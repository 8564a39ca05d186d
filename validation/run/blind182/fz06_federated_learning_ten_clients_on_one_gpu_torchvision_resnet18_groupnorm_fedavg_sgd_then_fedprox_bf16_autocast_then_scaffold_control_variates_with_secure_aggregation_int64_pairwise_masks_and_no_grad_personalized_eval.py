"""Federated learning simulated on one GPU, the way Flower/FedML-style research code does it with all
client models resident: a global torchvision resnet18 (num_classes 10, norm_layer GroupNorm(32), as
Hsieh et al. 2020 replace BatchNorm for non-IID clients; about 11.2M fp32 parameters) and 10 clients,
each a `copy.deepcopy` of the global model with its own SGD(lr 0.05, momentum 0.9) and its own
CIFAR-like 32 x 32 data made on the device, 5 local steps of batch 128 per round.
Round 1 (FedAvg): every client trains from the global weights, its update `local - global` kept as a
flat vector (`parameters_to_vector`), the global weights moved by the sample-weighted mean update.
Round 2 (FedProx, mu 0.01): the local loss adds `mu / 2 * sum((w - w_global)^2)` over the parameters,
under bf16 autocast. Round 3 (SCAFFOLD, Karimireddy et al.): server and client control variates
(c, c_i: one fp32 copy of the parameters per client, kept across rounds) correct every local gradient
(`grad += c - c_i`), option-II control-variate updates; the client updates are aggregated with
secure-aggregation masking by hand: each update quantized to int64 fixed point (2^20 scale) modulo
2^40, pairwise masks drawn from a per-pair seeded CUDA generator added by one client and subtracted by
the other, the server's modular sum unmasked only in aggregate. Then evaluation under no_grad: the
global model on 4 batches of 1,024 and each client's local model (its SCAFFOLD-round weights, the
personalized view) on its own batch of 512; 4 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.nn.utils import parameters_to_vector, vector_to_parameters

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18206)
if SMALL:
    CLIENTS, LOCAL_STEPS, B, EVAL_B, CLIENT_EVAL_B = 3, 2, 4, 8, 4
else:
    CLIENTS, LOCAL_STEPS, B, EVAL_B, CLIENT_EVAL_B = 10, 5, 128, 1024, 512
LR, MU = 0.05, 0.01
SCALE, MOD = 2**20, 2**40
device = "cuda" if torch.cuda.is_available() else "cpu"


def make_model():
    return torchvision.models.resnet18(num_classes=10, norm_layer=lambda c: nn.GroupNorm(32, c))


def client_batch(cid, n):
    x = torch.randn(n, 3, 32, 32, device=device) + 0.1 * cid  # a shifted (non-IID) feature distribution
    y = (torch.randint(0, 5, (n,), device=device) + cid) % 10  # a label skew per client
    return x, y


class Client:
    def __init__(self, cid, global_model):
        self.cid = cid
        self.model = copy.deepcopy(global_model)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LR, momentum=0.9)
        self.n_samples = LOCAL_STEPS * B
        self.control = None

    def load_global(self, global_model):
        with torch.no_grad():
            for p, g in zip(self.model.parameters(), global_model.parameters(), strict=True):
                p.copy_(g)

    def train(self, global_model, mode, server_control=None):
        self.load_global(global_model)
        global_params = [p.detach() for p in global_model.parameters()]
        self.model.train()
        for _ in range(LOCAL_STEPS):
            x, y = client_batch(self.cid, B)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "fedprox" and device == "cuda"):
                loss = F.cross_entropy(self.model(x), y)
            if mode == "fedprox":
                prox = sum(
                    (p - g).pow(2).sum() for p, g in zip(self.model.parameters(), global_params, strict=True)
                )
                loss = loss + MU / 2 * prox
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            if mode == "scaffold":
                for p, c, ci in zip(self.model.parameters(), server_control, self.control, strict=True):
                    p.grad.add_(c - ci)
            self.opt.step()
        delta = parameters_to_vector(self.model.parameters()).detach() - parameters_to_vector(global_params)
        if mode == "scaffold":
            new_control = [
                ci - c + (g - p.detach()) / (LOCAL_STEPS * LR)
                for p, g, c, ci in zip(
                    self.model.parameters(), global_params, server_control, self.control, strict=True
                )
            ]
            control_delta = parameters_to_vector(new_control) - parameters_to_vector(self.control)
            self.control = new_control
            return delta, control_delta, loss.item()
        return delta, None, loss.item()


def pair_mask(i, j, numel, rnd):
    gen = torch.Generator(device=device)
    gen.manual_seed(1_000_003 * rnd + 1009 * min(i, j) + max(i, j))
    return torch.randint(0, MOD, (numel,), generator=gen, device=device, dtype=torch.int64)


def secure_masked_update(cid, delta, rnd):
    q = torch.round(delta * SCALE).long() % MOD
    for other in range(CLIENTS):
        if other == cid:
            continue
        m = pair_mask(cid, other, delta.numel(), rnd)
        q = (q + m) % MOD if cid < other else (q - m) % MOD
    return q


def unmask_sum(masked_sum):
    signed = torch.where(masked_sum >= MOD // 2, masked_sum - MOD, masked_sum)
    return signed.double().div(SCALE).float()


global_model = make_model().to(device)
print(f"params {sum(p.numel() for p in global_model.parameters())}")
clients = [Client(cid, global_model) for cid in range(CLIENTS)]
if device == "cuda":
    print(f"global + clients {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def apply_update(model, mean_delta):
    with torch.no_grad():
        vector_to_parameters(parameters_to_vector(model.parameters()) + mean_delta, model.parameters())


# round 1: FedAvg
deltas, weights, losses = [], [], []
for client in clients:
    delta, _, loss = client.train(global_model, "fedavg")
    deltas.append(delta)
    weights.append(client.n_samples)
    losses.append(loss)
w = torch.tensor(weights, device=device, dtype=torch.float32)
apply_update(global_model, (torch.stack(deltas) * (w / w.sum())[:, None]).sum(0))
print(f"fedavg round mean client loss {sum(losses) / len(losses):.4f}")
del deltas, delta
if device == "cuda":
    print(f"fedavg peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# round 2: FedProx under bf16 autocast
total = torch.zeros(sum(p.numel() for p in global_model.parameters()), device=device)
losses = []
for client in clients:
    delta, _, loss = client.train(global_model, "fedprox")
    total += delta
    losses.append(loss)
apply_update(global_model, total / CLIENTS)
print(f"fedprox round mean client loss {sum(losses) / len(losses):.4f}")
del total, delta
if device == "cuda":
    print(f"fedprox peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# round 3: SCAFFOLD with secure aggregation of the model updates
server_control = [torch.zeros_like(p) for p in global_model.parameters()]
for client in clients:
    client.control = [torch.zeros_like(p) for p in global_model.parameters()]
masked_sum = None
control_total = None
losses = []
for client in clients:
    delta, control_delta, loss = client.train(global_model, "scaffold", server_control)
    masked = secure_masked_update(client.cid, delta, rnd=3)
    masked_sum = masked if masked_sum is None else (masked_sum + masked) % MOD
    control_total = control_delta if control_total is None else control_total + control_delta
    losses.append(loss)
apply_update(global_model, unmask_sum(masked_sum) / CLIENTS)
new_c = parameters_to_vector(server_control) + control_total / CLIENTS
vector_to_parameters(new_c, server_control)
print(
    f"scaffold round mean client loss {sum(losses) / len(losses):.4f} control norm {new_c.norm().item():.4f}"
)
del masked_sum, masked, control_total, delta, control_delta, new_c
if device == "cuda":
    print(f"scaffold peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

global_model.eval()
correct = 0
with torch.no_grad():
    for _ in range(4):
        x = torch.randn(EVAL_B, 3, 32, 32, device=device)
        y = torch.randint(0, 10, (EVAL_B,), device=device)
        correct += (global_model(x).argmax(1) == y).sum().item()
    personal = []
    for client in clients:
        client.model.eval()
        x, y = client_batch(client.cid, CLIENT_EVAL_B)
        personal.append((client.model(x).argmax(1) == y).float().mean().item())
print(f"global acc {correct / (4 * EVAL_B):.4f} personalized mean acc {sum(personal) / len(personal):.4f}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )

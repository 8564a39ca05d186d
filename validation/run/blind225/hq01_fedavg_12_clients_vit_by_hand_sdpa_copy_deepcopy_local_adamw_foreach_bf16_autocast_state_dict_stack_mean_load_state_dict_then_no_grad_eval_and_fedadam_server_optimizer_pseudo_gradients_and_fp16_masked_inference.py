"""FedAvg (McMahan et al. 2017) simulated on one GPU with every client resident, then FedAdam (Reddi et al.
2021, "Adaptive Federated Optimization"): a small ViT written by hand (patch 4 on 64 x 64 images, 256 tokens
+ CLS, d 384, 6 blocks of pre-norm attention through F.scaled_dot_product_attention and a GELU MLP, 100
classes) is the global model; 12 clients are `copy.deepcopy(global_model)` each, with their own non-IID data
(a label skew and a feature shift per client) made on the device.

Phase 1, FedAvg: 2 rounds; each client loads the global state_dict, takes 3 local AdamW (foreach) steps
at batch 64 under bf16 autocast and keeps its state_dict; the server averages every key with
`torch.stack([...]).mul(weights).sum(0)` weighted by the clients' sample counts and loads it back with
`load_state_dict`. Phase 2: no_grad evaluation of the global model at batch 512 and of each client's local
model on its own batch of 256. Phase 3, FedAdam: the client models are freed (empty_cache), clients
are trained one at a time from a deepcopy (4 local SGD steps, fp32), the mean client delta becomes the
server's pseudo-gradient (`p.grad = -(mean delta)`) and a server torch.optim.Adam steps the global
weights; 2 rounds of 12 clients. Phase 4: fp16 inference_mode with a key-padding mask (variable lengths
drawn on the host) passed to SDPA as a boolean attn_mask at batch 256. 4 phases."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(22501)
device = "cuda"
CLIENTS, ROUNDS, LOCAL, B = 12, 2, 3, 64
D, H, DEPTH, NCLS, IMG, PATCH = 384, 6, 6, 100, 64, 4


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.n2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, x, mask=None):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, PATCH, PATCH)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(1, (IMG // PATCH) ** 2 + 1, D) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, NCLS)

    def forward(self, x, mask=None):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        for blk in self.blocks:
            x = blk(x, mask)
        return self.head(self.norm(x[:, 0]))


def client_data(cid, n):
    x = torch.randn(n, 3, IMG, IMG, device=device) * (1 + 0.05 * cid) + 0.1 * cid
    y = (torch.randint(0, 30, (n,), device=device) + 7 * cid) % NCLS
    return x, y


global_model = ViT().to(device)
clients = [copy.deepcopy(global_model) for _ in range(CLIENTS)]
n_samples = torch.tensor([LOCAL * B * (1 + c % 3) for c in range(CLIENTS)], dtype=torch.float32)
weights = (n_samples / n_samples.sum()).to(device)

for rnd in range(ROUNDS):
    g_state = global_model.state_dict()
    states = []
    for cid, model in enumerate(clients):
        model.load_state_dict(g_state)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05, foreach=True)
        for _ in range(LOCAL):
            x, y = client_data(cid, B)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        del opt
        states.append(model.state_dict())
    avg = {}
    for k in g_state:
        stacked = torch.stack([s[k].float() for s in states])
        avg[k] = (stacked * weights.view(-1, *([1] * (stacked.dim() - 1)))).sum(0)
    global_model.load_state_dict(avg)
    del states, avg, stacked
    print(f"fedavg round {rnd} last client loss {loss.item():.4f}")
print("after fedavg: max allocated", torch.cuda.max_memory_allocated())
report("fedavg")

global_model.eval()
with torch.no_grad():
    x, y = client_data(0, 512)
    acc = (global_model(x).argmax(-1) == y).float().mean()
    local_accs = []
    for cid, model in enumerate(clients):
        model.eval()
        x, y = client_data(cid, 256)
        local_accs.append((model(x).argmax(-1) == y).float().mean())
print("global acc", acc.item(), "local accs", torch.stack(local_accs).tolist()[:3])
report("eval")

del clients, x, y, local_accs
torch.cuda.empty_cache()
server_opt = torch.optim.Adam(global_model.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-3)
for rnd in range(ROUNDS):
    global_model.train()
    mean_delta = [torch.zeros_like(p) for p in global_model.parameters()]
    for cid in range(CLIENTS):
        local = copy.deepcopy(global_model)
        opt = torch.optim.SGD(local.parameters(), lr=0.03, momentum=0.9)
        for _ in range(LOCAL + 1):
            x, y = client_data(cid, B)
            loss = F.cross_entropy(local(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        with torch.no_grad():
            for md, pl, pg in zip(mean_delta, local.parameters(), global_model.parameters()):
                md.add_((pl - pg) * weights[cid])
        del local, opt
    server_opt.zero_grad(set_to_none=False)
    for p, md in zip(global_model.parameters(), mean_delta):
        p.grad = -md
    server_opt.step()
    del mean_delta
    print(f"fedadam round {rnd} loss {loss.item():.4f}")
report("fedadam")

global_model.half().eval()
lengths = torch.randint(129, 258, (256,))
keep = torch.arange(257)[None, :] < lengths[:, None]
mask = keep.to(device)[:, None, None, :]
with torch.inference_mode():
    x = torch.randn(256, 3, IMG, IMG, device=device, dtype=torch.float16)
    logits = global_model(x, mask)
    probs = logits.float().softmax(-1)
print("fp16 masked inference", tuple(probs.shape), "max allocated", torch.cuda.max_memory_allocated())
report("fp16 masked inference")

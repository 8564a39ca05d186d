"""SwAV (written after facebookresearch/swav's main_swav.py and src/resnet50.py): a torchvision
ResNet-50 trunk in channels-last with the 2,048-2,048-128 projection head and 3,000 prototypes
(Linear without bias, their weights L2-normalised under no_grad before each step), multi-crop of
2 x 224 and 6 x 96 at batch 64 (the crops of one resolution run through the trunk together, the
groups found by `unique_consecutive` over the crops' widths), a queue of 3,840 embeddings per
high-resolution crop filled from the first step, the Sinkhorn-Knopp equipartition (3 iterations,
epsilon 0.05, in fp32 under no_grad) over the queue's and the batch's scores, the swapped
prediction loss over every other crop; fp16 autocast with GradScaler, SGD wrapped by LARC written
by hand (the trust ratio clipped at the learning rate and kept on the device by `torch.where`, the
gradient scaled in place before the step), the prototypes' gradients dropped for the first
iteration; 3 steps; then a linear probe's features of 1,024 images at 224 under no_grad in eval
mode at batch 256; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13602)
B, HI, LO, QLEN, NPROTO, N_EVAL, EB = (
    (4, 64, 32, 16, 30, 16, 8) if SMALL else (64, 224, 96, 3840, 3000, 1024, 256)
)
NCROPS = [2, 6]
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class SwAVResNet(nn.Module):
    def __init__(self, output_dim=128, hidden_mlp=2048, nmb_prototypes=3000):
        super().__init__()
        trunk = torchvision.models.resnet50()
        trunk.fc = nn.Identity()
        self.trunk = trunk
        self.l2norm = True
        self.projection_head = nn.Sequential(
            nn.Linear(2048, hidden_mlp),
            nn.BatchNorm1d(hidden_mlp),
            nn.ReLU(inplace=True),
            nn.Linear(hidden_mlp, output_dim),
        )
        self.prototypes = nn.Linear(output_dim, nmb_prototypes, bias=False)

    def forward_head(self, x):
        x = self.projection_head(x)
        if self.l2norm:
            x = nn.functional.normalize(x, dim=1, p=2)
        return x, self.prototypes(x)

    def forward(self, inputs):
        idx_crops = torch.cumsum(
            torch.unique_consecutive(torch.tensor([inp.shape[-1] for inp in inputs]), return_counts=True)[1],
            0,
        )
        start_idx = 0
        for end_idx in idx_crops:
            _out = self.trunk(
                torch.cat(inputs[start_idx:end_idx]).contiguous(memory_format=torch.channels_last)
            )
            if start_idx == 0:
                output = _out
            else:
                output = torch.cat((output, _out))
            start_idx = end_idx
        return self.forward_head(output)


@torch.no_grad()
def distributed_sinkhorn(out, epsilon=0.05, iters=3):
    Q = torch.exp(out / epsilon).t()
    Bn = Q.shape[1]
    K = Q.shape[0]
    sum_Q = torch.sum(Q)
    Q /= sum_Q
    for _it in range(iters):
        sum_of_rows = torch.sum(Q, dim=1, keepdim=True)
        Q /= sum_of_rows
        Q /= K
        Q /= torch.sum(Q, dim=0, keepdim=True)
        Q /= Bn
    Q *= Bn
    return Q.t()


class LARC:
    def __init__(self, optimizer, trust_coefficient=0.001, clip=True, eps=1e-8):
        self.optim = optimizer
        self.trust_coefficient, self.clip, self.eps = trust_coefficient, clip, eps

    @property
    def param_groups(self):
        return self.optim.param_groups

    @property
    def state(self):
        return self.optim.state

    def zero_grad(self):
        self.optim.zero_grad()

    def step(self):
        with torch.no_grad():
            weight_decays = []
            for group in self.optim.param_groups:
                weight_decay = group["weight_decay"] if "weight_decay" in group else 0
                weight_decays.append(weight_decay)
                group["weight_decay"] = 0
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    param_norm = torch.norm(p.data)
                    grad_norm = torch.norm(p.grad.data)
                    adaptive_lr = (
                        self.trust_coefficient
                        * param_norm
                        / (grad_norm + param_norm * weight_decay + self.eps)
                    )
                    if self.clip:
                        adaptive_lr = torch.clamp(adaptive_lr / group["lr"], max=1)
                    adaptive_lr = torch.where((param_norm != 0) & (grad_norm != 0), adaptive_lr, 1.0)
                    p.grad.data += weight_decay * p.data
                    p.grad.data *= adaptive_lr
        self.optim.step()
        for i, group in enumerate(self.optim.param_groups):
            group["weight_decay"] = weight_decays[i]


model = SwAVResNet(nmb_prototypes=NPROTO).to(device, memory_format=torch.channels_last)
base = torch.optim.SGD(model.parameters(), lr=4.8 * B / 256, momentum=0.9, weight_decay=1e-6)
optimizer = LARC(base, trust_coefficient=0.001, clip=True)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
queue = torch.zeros(2, QLEN, 128, device=device)
mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
std = torch.tensor([0.228, 0.224, 0.225], device=device).view(1, 3, 1, 1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
temperature = 0.1
for it in range(3):
    inputs = [(torch.rand(B, 3, HI, HI, device=device) - mean) / std for _ in range(NCROPS[0])]
    inputs += [(torch.rand(B, 3, LO, LO, device=device) - mean) / std for _ in range(NCROPS[1])]
    with torch.no_grad():
        w = model.prototypes.weight.data.clone()
        w = nn.functional.normalize(w, dim=1, p=2)
        model.prototypes.weight.copy_(w)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        embedding, output = model(inputs)
    embedding = embedding.detach()
    bs = inputs[0].size(0)
    loss = 0
    for i, crop_id in enumerate([0, 1]):
        with torch.no_grad():
            out = output[bs * crop_id : bs * (crop_id + 1)].detach().float()
            out = torch.cat((torch.mm(queue[i], model.prototypes.weight.t().float()), out))
            queue[i, bs:] = queue[i, :-bs].clone()
            queue[i, :bs] = embedding[crop_id * bs : (crop_id + 1) * bs]
            q = distributed_sinkhorn(out)[-bs:]
        subloss = 0
        for v in [v for v in range(sum(NCROPS)) if v != crop_id]:
            x = output[bs * v : bs * (v + 1)].float() / temperature
            subloss -= torch.mean(torch.sum(q * F.log_softmax(x, dim=1), dim=1))
        loss += subloss / (sum(NCROPS) - 1)
    loss /= 2
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    if it < 1:
        for name, p in model.named_parameters():
            if "prototypes" in name:
                p.grad = None
    scaler.step(optimizer)
    scaler.update()
    if device == "cuda":
        print(
            f"step {it} loss {loss.item():.4f} scale {scaler.get_scale()}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del inputs, embedding, output, loss, x, q, out
model.eval()
feats = []
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    for _ in range(0, N_EVAL, EB):
        x = ((torch.rand(EB, 3, HI, HI, device=device) - mean) / std).contiguous(
            memory_format=torch.channels_last
        )
        feats.append(model.trunk(x).float())
    feats = torch.cat(feats)
    feats = (feats - feats.mean(0)) / (feats.std(0) + 1e-6)
if device == "cuda":
    print(
        f"features {tuple(feats.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )

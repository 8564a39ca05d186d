"""Prototypical Networks (Snell et al. 2017) with the ResNet-12 backbone of TADAM / MetaOptNet,
written by hand: 4 residual blocks of widths 64, 160, 320, 640, each three 3 x 3 convolutions with
BatchNorm2d and LeakyReLU(0.1), a 1 x 1 conv + BN shortcut and MaxPool2d(2), then global average
pooling to 640-d embeddings. Episodic training on 84 x 84 RGB: 15-way 5-shot with 10 queries per
class (225 images per episode in one forward), prototypes as the mean support embedding per class,
logits the negative squared Euclidean distance (torch.cdist squared), cross-entropy on the queries;
channels_last, bf16 autocast, SGD (lr 0.1, Nesterov momentum 0.9, weight decay 5e-4); the first
episode its own phase then 4 episodes. Then meta-test under torch.inference_mode: 8 episodes of
5-way 1-shot 15-query, accuracy from the nearest prototype. Then the original paper's Conv-4
ProtoNet (4 blocks of Conv 64 + BN + ReLU + MaxPool, 1,600-d embeddings) after del + empty_cache,
fp32 with Adam (lr 1e-3), 60-way 5-shot 5-query episodes (600 images), 3 episodes; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18105)
if SMALL:
    RES, WAYS, QUERY, EPISODES, TEST_EP, C4_WAYS, WIDTHS = 20, 3, 2, 2, 2, 4, (8, 16, 16, 32)
else:
    RES, WAYS, QUERY, EPISODES, TEST_EP, C4_WAYS, WIDTHS = 84, 15, 10, 5, 8, 60, (64, 160, 320, 640)
SHOTS = 5
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv3 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.LeakyReLU(0.1)
        self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out = self.relu(out + self.downsample(x))
        return self.pool(out)


class ResNet12(nn.Module):
    def __init__(self, widths):
        super().__init__()
        chans = (3, *widths)
        self.layers = nn.Sequential(*[Block(chans[i], chans[i + 1]) for i in range(4)])

    def forward(self, x):
        return self.layers(x).mean(dim=(2, 3))


class Conv4(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        blocks = []
        for i in range(4):
            blocks += [
                nn.Conv2d(3 if i == 0 else hidden, hidden, 3, padding=1),
                nn.BatchNorm2d(hidden),
                nn.ReLU(),
                nn.MaxPool2d(2),
            ]
        self.encoder = nn.Sequential(*blocks)

    def forward(self, x):
        return self.encoder(x).flatten(1)


def make_episode(ways, shots, query, channels_last=False):
    x = torch.randn(ways * (shots + query), 3, RES, RES, device=device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def proto_logits(emb, ways, shots, query):
    support = emb[: ways * shots].view(ways, shots, -1)
    queries = emb[ways * shots :]
    prototypes = support.mean(dim=1)
    return -torch.cdist(queries, prototypes).pow(2)


def query_labels(ways, query):
    return torch.arange(ways, device=device).repeat_interleave(query)


model = ResNet12(WIDTHS).to(device, memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
print(f"params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
yq = query_labels(WAYS, QUERY)
for ep in range(EPISODES):
    x = make_episode(WAYS, SHOTS, QUERY, channels_last=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        emb = model(x)
    logits = proto_logits(emb.float(), WAYS, SHOTS, QUERY)
    loss = F.cross_entropy(logits, yq)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    acc = (logits.argmax(1) == yq).float().mean().item()
    print(f"episode {ep} loss {loss.item():.4f} acc {acc:.3f}")
    if ep == 0 and device == "cuda":
        print(f"first episode peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
del x, emb, logits, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
accs = []
yq_test = query_labels(5, 15)
with torch.inference_mode():
    for _ in range(TEST_EP):
        x = make_episode(5, 1, 15, channels_last=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            emb = model(x)
        pred = proto_logits(emb.float(), 5, 1, 15).argmax(1)
        accs.append((pred == yq_test).float().mean().item())
print(f"5-way 1-shot acc {sum(accs) / len(accs):.3f}")
if device == "cuda":
    print(f"test peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, optimizer, x, emb, pred
if device == "cuda":
    torch.cuda.empty_cache()
conv4 = Conv4().to(device)
c4_opt = torch.optim.Adam(conv4.parameters(), lr=1e-3)
conv4.train()
yq = query_labels(C4_WAYS, 5)
for ep in range(3):
    x = make_episode(C4_WAYS, SHOTS, 5)
    logits = proto_logits(conv4(x), C4_WAYS, SHOTS, 5)
    loss = F.cross_entropy(logits, yq)
    c4_opt.zero_grad()
    loss.backward()
    c4_opt.step()
    print(f"conv4 episode {ep} loss {loss.item():.4f}")
if device == "cuda":
    print(f"conv4 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")

"""DGCNN written by hand for point-cloud classification: 1,024 points at batch 32, four EdgeConv
layers that rebuild a k=20 nearest-neighbour graph in feature space each time (pairwise distances
by matmul, topk, batch-offset flat indices gathering (B, N, k, C) edge features, max over
neighbours), a 1,024-d embedding pooled by max and mean, dropout MLP head; SGD with momentum and a
cosine schedule, fp32, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5906)
B, N, K = (2, 64, 4) if SMALL else (32, 1024, 20)


def knn(x, k):
    inner = -2 * torch.matmul(x.transpose(2, 1), x)
    sq = torch.sum(x**2, dim=1, keepdim=True)
    return (-sq - inner - sq.transpose(2, 1)).topk(k=k, dim=-1)[1]


def edge_features(x, k):
    b, c, n = x.shape
    idx = knn(x, k) + torch.arange(b, device=x.device).view(-1, 1, 1) * n
    flat = x.transpose(2, 1).contiguous()
    nbr = flat.view(b * n, -1)[idx.view(-1), :].view(b, n, k, c)
    center = flat.view(b, n, 1, c).expand(-1, -1, k, -1)
    return torch.cat((nbr - center, center), dim=3).permute(0, 3, 1, 2).contiguous()


def edge_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(2 * cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.2))


class DGCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(
            [edge_conv(3, 64), edge_conv(64, 64), edge_conv(64, 128), edge_conv(128, 256)]
        )
        self.embed = nn.Sequential(
            nn.Conv1d(512, 1024, 1, bias=False), nn.BatchNorm1d(1024), nn.LeakyReLU(0.2)
        )
        self.head = nn.Sequential(
            nn.Linear(2048, 512, bias=False),
            nn.BatchNorm1d(512),
            nn.LeakyReLU(0.2),
            nn.Dropout(0.5),
            nn.Linear(512, 256),
            nn.BatchNorm1d(256),
            nn.LeakyReLU(0.2),
            nn.Dropout(0.5),
            nn.Linear(256, 40),
        )

    def forward(self, x):
        feats = []
        for conv in self.convs:
            x = conv(edge_features(x, K)).max(dim=-1)[0]
            feats.append(x)
        x = self.embed(torch.cat(feats, dim=1))
        return self.head(torch.cat((x.amax(dim=-1), x.mean(dim=-1)), dim=1))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = DGCNN().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 250)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    pts = torch.randn(B, 3, N, device=device)
    labels = torch.randint(0, 40, (B,), device=device)
    loss = F.cross_entropy(model(pts), labels, label_smoothing=0.2)
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    del pts, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

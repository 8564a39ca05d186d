"""A DGCNN-style point-cloud classifier: k nearest neighbours from torch.cdist and topk, neighbour features
gathered with index arithmetic, EdgeConv as a shared MLP (1x1 Conv2d, BatchNorm2d, LeakyReLU) over
(point, neighbour) pairs, max over neighbours, global max pool; fp32, SGD with momentum, batch 16 clouds
of 1024 points, k 20, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
BATCH, POINTS, K = (2, 64, 4) if SMALL else (16, 1024, 20)
torch.manual_seed(1403)
device = "cuda" if torch.cuda.is_available() else "cpu"


def knn_features(x, k):
    # x: (B, C, N) -> (B, 2C, N, k)
    b, c, n = x.shape
    pts = x.transpose(1, 2)
    idx = torch.cdist(pts, pts).topk(k, dim=-1, largest=False).indices
    idx = (idx + torch.arange(b, device=x.device).view(-1, 1, 1) * n).reshape(-1)
    neigh = pts.reshape(b * n, c)[idx].view(b, n, k, c)
    center = pts.unsqueeze(2).expand(-1, -1, k, -1)
    return torch.cat([neigh - center, center], dim=3).permute(0, 3, 1, 2).contiguous()


class EdgeConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.mlp = nn.Sequential(nn.Conv2d(2 * cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.2))

    def forward(self, x):
        return self.mlp(knn_features(x, K)).max(dim=-1).values


class DGCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.e1, self.e2, self.e3 = EdgeConv(3, 64), EdgeConv(64, 64), EdgeConv(64, 128)
        self.head = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 40))

    def forward(self, x):
        x1 = self.e1(x)
        x2 = self.e2(x1)
        x3 = self.e3(x2)
        return self.head(torch.cat([x1, x2, x3], dim=1).max(dim=-1).values)


model = DGCNN().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    clouds = torch.randn(BATCH, 3, POINTS, device=device)
    labels = torch.randint(0, 40, (BATCH,), device=device)
    loss = F.cross_entropy(model(clouds), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

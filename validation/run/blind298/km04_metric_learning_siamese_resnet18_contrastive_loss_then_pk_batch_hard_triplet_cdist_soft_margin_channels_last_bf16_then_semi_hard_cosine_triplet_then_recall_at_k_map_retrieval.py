"""Metric learning as courses teach it (Hadsell et al.'s siamese contrastive loss, then Hermans et al.'s
"In Defense of the Triplet Loss" batch-hard mining), with a torchvision ResNet-18 trunk whose fc is
replaced by a 128-d embedding head (random weights, synthetic 128x128 "identities").

Phases: (1) siamese network: the same trunk on the two images of 96 pairs, Euclidean distance by
F.pairwise_distance, the contrastive loss y d^2 + (1 - y) max(0, m - d)^2, Adam, 6 steps in fp32;
(2) P x K sampling (32 identities x 4 images), the embeddings' full distance matrix by torch.cdist,
label masks by broadcast equality, the hardest positive (max over masked distances) and the hardest
negative (min after adding the row max to non-negatives), soft-margin loss softplus(hp - hn),
channels_last model and inputs under bf16 autocast, SGD with momentum and nesterov, 6 steps;
(3) nn.TripletMarginWithDistanceLoss with a cosine distance on (anchor, positive, negative) triplets
mined semi-hard from a cdist of the batch (the negative farther than the positive, nearest such),
6 steps; (4) retrieval evaluation under inference_mode: a gallery of 4096 images embedded in
chunks of 512, L2-normalized, 512 queries, cdist to the gallery, topk(10) for recall@1/5/10 and a
full argsort for mean average precision. 4 phases."""

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

torch.manual_seed(29804)
device = "cuda" if torch.cuda.is_available() else "cpu"
RES, EMB, PAIRS, P, K, STEPS, GALLERY, QUERIES, CHUNK, IDS = 128, 128, 96, 32, 4, 6, 4096, 512, 512, 1000


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class EmbeddingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = torchvision.models.resnet18(weights=None)
        self.trunk.fc = nn.Sequential(nn.Linear(512, 256), nn.PReLU(), nn.Linear(256, EMB))

    def forward(self, x):
        return self.trunk(x)


class SiameseNet(nn.Module):
    def __init__(self, embedding_net):
        super().__init__()
        self.embedding_net = embedding_net

    def forward(self, x1, x2):
        return self.embedding_net(x1), self.embedding_net(x2)


def contrastive_loss(o1, o2, target, margin=1.0):
    d = F.pairwise_distance(o1, o2)
    losses = target * d.pow(2) + (1 - target) * F.relu(margin - d).pow(2)
    return 0.5 * losses.mean()


def images_of(ids):
    base = torch.rand(len(ids), 3, RES, RES, device=device)
    return base + 0.1 * ids.view(-1, 1, 1, 1).float() / IDS


embedding_net = EmbeddingNet().to(device)
siamese = SiameseNet(embedding_net)
opt = torch.optim.Adam(siamese.parameters(), lr=3e-4)
for _ in range(STEPS):
    a = torch.randint(0, IDS, (PAIRS,), device=device)
    same = torch.rand(PAIRS, device=device) < 0.5
    b = torch.where(same, a, torch.randint(0, IDS, (PAIRS,), device=device))
    o1, o2 = siamese(images_of(a), images_of(b))
    loss = contrastive_loss(o1, o2, (a == b).float())
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"contrastive loss {loss.item():.4f}")
del opt, o1, o2
report("siamese contrastive")


def batch_hard_triplet_loss(emb, labels):
    dist = torch.cdist(emb, emb)
    same = labels.unsqueeze(0) == labels.unsqueeze(1)
    eye = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    pos_mask = same & ~eye
    hardest_positive = (dist * pos_mask.float()).max(dim=1, keepdim=True)[0]
    max_dist = dist.max(dim=1, keepdim=True)[0]
    hardest_negative = (dist + max_dist * same.float()).min(dim=1, keepdim=True)[0]
    return F.softplus(hardest_positive - hardest_negative).mean()


embedding_net = embedding_net.to(memory_format=torch.channels_last)
opt = torch.optim.SGD(embedding_net.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
for _ in range(STEPS):
    ids = torch.randperm(IDS, device=device)[:P].repeat_interleave(K)
    x = images_of(ids).contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        emb = embedding_net(x)
    loss = batch_hard_triplet_loss(emb.float(), ids)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"batch-hard triplet loss {loss.item():.4f}")
report("batch hard triplet")

triplet = nn.TripletMarginWithDistanceLoss(
    distance_function=lambda u, v: 1.0 - F.cosine_similarity(u, v), margin=0.2
)
for _ in range(STEPS):
    ids = torch.randperm(IDS, device=device)[:P].repeat_interleave(K)
    x = images_of(ids).contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        emb = embedding_net(x).float()
    with torch.no_grad():
        dist = torch.cdist(emb, emb)
        same = ids.unsqueeze(0) == ids.unsqueeze(1)
        pos_idx = torch.arange(P * K, device=device).view(P, K).roll(1, dims=1).flatten()
        d_ap = dist.gather(1, pos_idx.view(-1, 1))
        candidates = dist.masked_fill(same | (dist <= d_ap), float("inf"))
        neg_idx = candidates.argmin(dim=1)
    loss = triplet(emb, emb[pos_idx], emb[neg_idx])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"semi-hard cosine triplet loss {loss.item():.4f}")
del opt
report("semi hard cosine triplet")

embedding_net.eval()
with torch.inference_mode():
    gallery_ids = torch.arange(GALLERY, device=device) % IDS
    gallery = []
    for i in range(0, GALLERY, CHUNK):
        x = images_of(gallery_ids[i : i + CHUNK]).contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            gallery.append(F.normalize(embedding_net(x).float(), dim=1))
    gallery = torch.cat(gallery)
    query_ids = torch.randint(0, IDS, (QUERIES,), device=device)
    xq = images_of(query_ids).contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        queries = F.normalize(embedding_net(xq).float(), dim=1)
    d = torch.cdist(queries, gallery)
    top = d.topk(10, dim=1, largest=False).indices
    hit = gallery_ids[top] == query_ids.unsqueeze(1)
    recalls = [hit[:, :k].any(dim=1).float().mean().item() for k in (1, 5, 10)]
    order = d.argsort(dim=1)
    rel = (gallery_ids[order] == query_ids.unsqueeze(1)).float()
    precision = rel.cumsum(dim=1) / torch.arange(1, GALLERY + 1, device=device)
    ap = (precision * rel).sum(dim=1) / rel.sum(dim=1).clamp(min=1)
print(f"recall@1/5/10 {recalls} mAP {ap.mean().item():.4f}")
report("retrieval recall at k")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")

"""MoCo v2's `builder.MoCo` on one GPU, written out as the repository does it: a query and a key encoder (two
torchvision resnet50 with `num_classes=128` and the MLP head `Linear(2048, 2048) + ReLU + fc`), the key
encoder's parameters copied from the query's and frozen, the momentum update written as
`param_k.data = param_k.data * m + param_q.data * (1. - m)` (a new tensor per parameter per step), a queue of
65,536 L2-normalised keys held as a registered `(128, 65536)` CUDA buffer with a `queue_ptr` buffer, enqueue
by `queue[:, ptr:ptr + batch_size] = keys.T`, and the shuffle-BN trick done on one GPU (`randperm` on the
device, `argsort` to undo). Logits are `[l_pos, l_neg]` from `einsum("nc,nc->n")` and `einsum("nc,ck->nk", q,
queue.clone().detach())` over the temperature 0.2, labels zeros, cross-entropy; SGD momentum 0.9, weight
decay 1e-4, lr 0.03, both views random `randn` images under bf16 autocast; the probe's SGD uses lr 0.1.

Phases: 0 the two encoders, queue and SGD; 1 four MoCo steps at batch 64 x 224; 2 the kNN monitor of the MoCo
demo: a feature bank of 2048 images (batches of 256, `no_grad`, normalised) and a weighted top-200 kNN vote
(`mm`, `topk`, `scatter` one-hot, temperature 0.1) for 512 test images; 3 a frozen linear probe: `fc` replaced
by `Identity`, features under `no_grad`, a `Linear(2048, 1000)` trained for 3 steps at batch 256 with SGD."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision.models as models

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    IMG, B, K, BANK, TEST, BANK_B, PROBE_B, NCLS, KNN_K = 64, 4, 64, 32, 16, 16, 8, 10, 5
else:
    IMG, B, K, BANK, TEST, BANK_B, PROBE_B, NCLS, KNN_K = 224, 64, 65536, 2048, 512, 256, 256, 1000, 200


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
            f"memory_allocated {torch.cuda.memory_allocated()} "
            f"max_memory_reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(tag)


class MoCo(nn.Module):
    def __init__(self, base_encoder, dim=128, K=65536, m=0.999, T=0.2, mlp=True):
        super().__init__()
        self.K = K
        self.m = m
        self.T = T
        self.encoder_q = base_encoder(num_classes=dim)
        self.encoder_k = base_encoder(num_classes=dim)
        if mlp:
            dim_mlp = self.encoder_q.fc.weight.shape[1]
            self.encoder_q.fc = nn.Sequential(nn.Linear(dim_mlp, dim_mlp), nn.ReLU(), self.encoder_q.fc)
            self.encoder_k.fc = nn.Sequential(nn.Linear(dim_mlp, dim_mlp), nn.ReLU(), self.encoder_k.fc)
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters(), strict=True):
            param_k.data.copy_(param_q.data)
            param_k.requires_grad = False
        self.register_buffer("queue", torch.randn(dim, K))
        self.queue = nn.functional.normalize(self.queue, dim=0)
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters(), strict=True):
            param_k.data = param_k.data * self.m + param_q.data * (1.0 - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        assert self.K % batch_size == 0
        self.queue[:, ptr : ptr + batch_size] = keys.T
        ptr = (ptr + batch_size) % self.K
        self.queue_ptr[0] = ptr

    @torch.no_grad()
    def _batch_shuffle_single_gpu(self, x):
        idx_shuffle = torch.randperm(x.shape[0], device=x.device)
        idx_unshuffle = torch.argsort(idx_shuffle)
        return x[idx_shuffle], idx_unshuffle

    def forward(self, im_q, im_k):
        q = self.encoder_q(im_q)
        q = nn.functional.normalize(q, dim=1)
        with torch.no_grad():
            self._momentum_update_key_encoder()
            im_k, idx_unshuffle = self._batch_shuffle_single_gpu(im_k)
            k = self.encoder_k(im_k)
            k = nn.functional.normalize(k, dim=1)
            k = k[idx_unshuffle]
        l_pos = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", [q, self.queue.clone().detach()])
        logits = torch.cat([l_pos, l_neg], dim=1)
        logits /= self.T
        labels = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
        self._dequeue_and_enqueue(k.float())
        return logits, labels


model = MoCo(models.resnet50, dim=128, K=K).to(device)
criterion = nn.CrossEntropyLoss().to(device)
optimizer = torch.optim.SGD(model.parameters(), 0.03, momentum=0.9, weight_decay=1e-4)
report("query and key encoders, queue, SGD")

model.train()
for i in range(4):
    im_q = torch.randn(B, 3, IMG, IMG, device=device)
    im_k = torch.randn(B, 3, IMG, IMG, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        output, target = model(im_q=im_q, im_k=im_k)
        loss = criterion(output.float(), target)
    acc1 = (output.argmax(1) == target).float().mean() * 100
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {i} loss {loss.item():.4f} acc@1 {acc1.item():.2f} queue_ptr {int(model.queue_ptr)}")
report("MoCo steps with queue")

net = model.encoder_q
net.eval()
bank_labels = torch.randint(0, NCLS, (BANK,), device=device)
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    feature_bank = []
    for _s in range(0, BANK, BANK_B):
        feature = net(torch.randn(BANK_B, 3, IMG, IMG, device=device))
        feature_bank.append(F.normalize(feature.float(), dim=1))
    feature_bank = torch.cat(feature_bank, dim=0).t().contiguous()
    total_top1 = 0
    for _s in range(0, TEST, BANK_B):
        feature = F.normalize(net(torch.randn(BANK_B, 3, IMG, IMG, device=device)).float(), dim=1)
        sim_matrix = torch.mm(feature, feature_bank)
        sim_weight, sim_indices = sim_matrix.topk(k=KNN_K, dim=-1)
        sim_labels = torch.gather(bank_labels.expand(feature.size(0), -1), dim=-1, index=sim_indices)
        sim_weight = (sim_weight / 0.1).exp()
        one_hot_label = torch.zeros(feature.size(0) * KNN_K, NCLS, device=device)
        one_hot_label = one_hot_label.scatter(dim=-1, index=sim_labels.view(-1, 1), value=1.0)
        pred_scores = torch.sum(
            one_hot_label.view(feature.size(0), -1, NCLS) * sim_weight.unsqueeze(dim=-1), dim=1
        )
        pred_labels = pred_scores.argsort(dim=-1, descending=True)
        total_top1 += (pred_labels[:, 0] == torch.randint(0, NCLS, (feature.size(0),), device=device)).sum()
print(f"kNN monitor top1 {total_top1.item() / TEST * 100:.2f}")
report("kNN monitor feature bank")

net.fc = nn.Identity()
for p in net.parameters():
    p.requires_grad = False
classifier = nn.Linear(2048, NCLS).to(device)
probe_opt = torch.optim.SGD(classifier.parameters(), lr=0.1, momentum=0.9)
for i in range(3):
    x = torch.randn(PROBE_B, 3, IMG, IMG, device=device)
    y = torch.randint(0, NCLS, (PROBE_B,), device=device)
    with torch.no_grad():
        feats = net(x)
    loss = F.cross_entropy(classifier(feats), y)
    probe_opt.zero_grad()
    loss.backward()
    probe_opt.step()
    print(f"probe step {i} loss {loss.item():.4f}")
report("frozen linear probe")

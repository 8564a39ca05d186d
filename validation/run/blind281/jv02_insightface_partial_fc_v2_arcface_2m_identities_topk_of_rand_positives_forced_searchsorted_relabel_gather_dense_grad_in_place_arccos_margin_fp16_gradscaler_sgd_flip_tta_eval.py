"""Face recognition at a scale where the classifier dominates memory: InsightFace's PartialFC_V2 on one
rank, as its training script runs it. A torchvision ResNet-50 backbone (112 x 112 faces, 512-d
embedding: dropout, linear, BatchNorm1d) under fp16 autocast with a GradScaler; the classifier holds
2,000,000 identity centres as one fp32 parameter (2,000,000 x 512, N(0, 0.01)). Each step samples 10%
of the centres: `torch.unique` of the batch's labels, those forced into the sample by writing 2.0 into
a `torch.rand` vector of 2,000,000 and taking `topk(200,000)` of it, sorted; the labels renumbered with
`torch.searchsorted`, and `weight[index]` gathered (its backward a dense 2,000,000 x 512 gradient).
Normalised embeddings and centres meet in `F.linear`, the logits clamped to [-1, 1] and the ArcFace
margin applied in place under no_grad (`arccos_`, add 0.5 to the target angle through advanced-index
assignment, `cos_`, times 64), then cross-entropy. SGD (momentum 0.9, weight decay 5e-4) over backbone
and centres, backbone gradients unscaled and clipped to norm 5. Phase 1: 8 steps at batch 128.
Phase 2: verification embeddings under inference_mode for 2 x 2,048 faces in batches of 512, each
face plus its horizontal flip (the two embeddings summed, then normalised), cosine scores of the pairs.
2 phases."""

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

torch.manual_seed(2812)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Backbone(nn.Module):
    def __init__(self, dim=512):
        super().__init__()
        net = torchvision.models.resnet50()
        net.fc = nn.Identity()
        self.body = net
        self.drop = nn.Dropout(0.0)
        self.fc = nn.Linear(2048, dim)
        self.features = nn.BatchNorm1d(dim, eps=1e-05)

    def forward(self, x):
        return self.features(self.fc(self.drop(self.body(x))))


class ArcFace:
    def __init__(self, s=64.0, margin=0.5):
        self.s, self.margin = s, margin

    def __call__(self, logits, labels):
        index_positive = torch.where(labels != -1)[0]
        target_logit = logits[index_positive, labels[index_positive].view(-1)]
        with torch.no_grad():
            target_logit.arccos_()
            logits.arccos_()
            final_target_logit = target_logit + self.margin
            logits[index_positive, labels[index_positive].view(-1)] = final_target_logit
            logits.cos_()
        return logits * self.s


class PartialFC_V2(nn.Module):
    def __init__(self, margin_loss, embedding_size, num_classes, sample_rate=0.1, fp16=True):
        super().__init__()
        self.num_local = num_classes
        self.num_sample = int(sample_rate * num_classes)
        self.margin_softmax = margin_loss
        self.fp16 = fp16
        self.weight = nn.Parameter(torch.normal(0, 0.01, (self.num_local, embedding_size), device=dev))

    def sample(self, labels, index_positive):
        with torch.no_grad():
            positive = torch.unique(labels[index_positive], sorted=True).cuda()
            if self.num_sample - positive.size(0) >= 0:
                perm = torch.rand(size=[self.num_local]).cuda()
                perm[positive] = 2.0
                index = torch.topk(perm, k=self.num_sample)[1].cuda()
                index = index.sort()[0].cuda()
            else:
                index = positive
            self.weight_index = index
            labels[index_positive] = torch.searchsorted(index, labels[index_positive])
        return self.weight[self.weight_index]

    def forward(self, embeddings, labels):
        labels = labels.view(-1, 1)
        index_positive = (0 <= labels) & (labels < self.num_local)
        labels[~index_positive] = -1
        weight = self.sample(labels, index_positive) if self.training else self.weight
        with torch.autocast("cuda", enabled=self.fp16):
            norm_embeddings = F.normalize(embeddings)
            norm_weight_activated = F.normalize(weight)
            logits = F.linear(norm_embeddings, norm_weight_activated)
        if self.fp16:
            logits = logits.float()
        logits = logits.clamp(-1, 1)
        logits = self.margin_softmax(logits, labels)
        return F.cross_entropy(logits, labels.view(-1))


backbone = Backbone().to(dev)
module_partial_fc = PartialFC_V2(ArcFace(), 512, 2_000_000, sample_rate=0.1, fp16=True)
opt = torch.optim.SGD(
    [{"params": backbone.parameters()}, {"params": module_partial_fc.parameters()}],
    lr=0.1,
    momentum=0.9,
    weight_decay=5e-4,
)
scaler = torch.amp.GradScaler("cuda", growth_interval=100)
backbone.train()
module_partial_fc.train()
for _step in range(8):
    img = torch.randn(128, 3, 112, 112, device=dev)
    local_labels = torch.randint(0, 2_000_000, (128,), device=dev)
    with torch.autocast("cuda", dtype=torch.float16):
        local_embeddings = backbone(img)
    loss = module_partial_fc(local_embeddings.float(), local_labels)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(backbone.parameters(), 5)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
print("train", round(loss.item(), 3), "scale", scaler.get_scale())
report("train_partial_fc_arcface_fp16")

del loss, local_embeddings
backbone.eval()
embs = []
with torch.inference_mode():
    for _b in range(8):
        img = torch.randn(512, 3, 112, 112, device=dev)
        with torch.autocast("cuda", dtype=torch.float16):
            e = backbone(img) + backbone(torch.flip(img, dims=[3]))
        embs.append(F.normalize(e.float()))
    embs = torch.cat(embs)
    a, b = embs[:2048], embs[2048:]
    sims = (a * b).sum(dim=1)
    print("pairs", sims.shape[0], "mean cos", round(sims.mean().item(), 4))
report("inference_mode_flip_tta_verification")

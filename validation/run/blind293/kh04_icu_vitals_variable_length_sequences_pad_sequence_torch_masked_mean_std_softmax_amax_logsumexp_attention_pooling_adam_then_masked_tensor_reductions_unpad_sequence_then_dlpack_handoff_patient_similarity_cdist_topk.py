"""ICU vital-sign sequences of unequal length, handled with `torch.masked`'s masked reductions rather than
hand-written `masked_fill` arithmetic (fp32, synthetic and seeded).
Each patient: 48..1,536 hourly steps (lengths drawn on the host) of 40 vitals; per-patient tensors are
padded with `torch.nn.utils.rnn.pad_sequence(batch_first=True)` and a (B, T) validity mask built from the
lengths.
Phase 1, training a mortality / length-of-stay model for 6 Adam steps at 96 patients: per-patient
standardisation by `torch.masked.mean` and `torch.masked.std` over time, a per-step MLP encoder (40 -> 384
-> 384, GELU), 4 attention-pooling heads by `torch.masked.softmax` over time, a `torch.masked.amax` max-pool
and a `torch.masked.logsumexp` soft-max pool, BCE-with-logits plus a Gaussian length-of-stay term.
Phase 2, cohort statistics under `torch.no_grad()` with the prototype `MaskedTensor`
(`torch.masked.masked_tensor`): per-patient `sum`, `amax` and `mean` of a 256-patient padded cohort, filled
back with `to_tensor(0.0)`; the encoder's step embeddings returned to per-patient tensors by
`torch.nn.utils.rnn.unpad_sequence` and re-padded.
Phase 3, a DLPack hand-off of the 256 patient embeddings (`torch.utils.dlpack.to_dlpack` / `from_dlpack`
and `torch.from_dlpack` through `__dlpack__`, zero-copy views as another framework would receive them), then
patient similarity: `torch.cdist` and `topk(10)` over the cohort.
3 phases."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence, unpad_sequence
from torch.utils.dlpack import from_dlpack, to_dlpack

torch.manual_seed(2934)
dev = "cuda"
NV, H, NHEAD = 40, 384, 4
host = torch.Generator().manual_seed(2934)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def cohort(n):
    lengths = torch.randint(48, 1537, (n,), generator=host)
    seqs = [torch.randn(int(L), NV, device=dev) * 3.0 + 60.0 for L in lengths]
    x = pad_sequence(seqs, batch_first=True, padding_value=0.0)
    mask = torch.arange(x.shape[1], device=dev)[None, :] < lengths.to(dev)[:, None]
    died = torch.randint(0, 2, (n,), device=dev).float()
    los = lengths.to(dev).float() / 24.0
    return x, mask, lengths, died, los


class VitalsModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(NV, H), nn.GELU(), nn.Linear(H, H), nn.GELU())
        self.att = nn.Linear(H, NHEAD)
        self.head = nn.Linear(H * NHEAD + 2 * H, 3)

    def encode(self, x, mask):
        m3 = mask[:, :, None].expand_as(x)
        mu = torch.masked.mean(x, dim=1, keepdim=True, mask=m3)
        sd = torch.masked.std(x, dim=1, keepdim=True, mask=m3)
        return self.enc((x - mu) / (sd + 1e-3))

    def forward(self, x, mask):
        h = self.encode(x, mask)  # (B, T, H)
        mh = mask[:, :, None].expand_as(h)
        w = torch.masked.softmax(self.att(h), dim=1, mask=mask[:, :, None].expand(-1, -1, NHEAD))
        att = torch.einsum("bth,btd->bhd", w.nan_to_num(0.0), h).flatten(1)
        mx = torch.masked.amax(h, dim=1, mask=mh)
        lse = torch.masked.logsumexp(h, dim=1, mask=mh)
        return self.head(torch.cat([att, mx, lse], dim=1))


model = VitalsModel().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

# --- phase 1: training with torch.masked reductions -------------------------------------------------------
for step in range(6):
    x, mask, lengths, died, los = cohort(96)
    out = model(x, mask)
    loss = F.binary_cross_entropy_with_logits(out[:, 0], died) + F.gaussian_nll_loss(
        out[:, 1], los, F.softplus(out[:, 2]) + 1e-3
    )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print("step", step, "T", x.shape[1], "loss", round(loss.item(), 4))
del x, mask, lengths, died, los, out, loss
report("torch_masked_reductions_training")

# --- phase 2: MaskedTensor cohort statistics, unpad_sequence ----------------------------------------------
model.eval()
with torch.no_grad():
    x, mask, lengths, _, _ = cohort(256)
    mt = torch.masked.masked_tensor(x, mask[:, :, None].expand_as(x))
    tot = mt.sum(dim=1).to_tensor(0.0)
    peak = mt.amax(dim=1).to_tensor(0.0)
    mean = mt.mean(dim=1).to_tensor(0.0)
    print("cohort stats", tuple(tot.shape), tuple(peak.shape), tuple(mean.shape))
    del mt
    h = model.encode(x, mask)
    per_patient = unpad_sequence(h, lengths, batch_first=True)
    print("unpadded", len(per_patient), tuple(per_patient[0].shape))
    repadded = pad_sequence(per_patient, batch_first=True)
    emb = torch.stack([p.mean(0) for p in per_patient])  # (256, H)
    del h, per_patient, repadded, tot, peak, mean
report("masked_tensor_stats_unpad_sequence")

# --- phase 3: DLPack hand-off and patient similarity ------------------------------------------------------
with torch.no_grad():
    capsule = to_dlpack(emb)
    received = from_dlpack(capsule)  # zero-copy, as another framework's array
    again = torch.from_dlpack(received)  # through __dlpack__ / __dlpack_device__
    print("same storage", again.data_ptr() == emb.data_ptr())
    normed = F.normalize(again, dim=1)
    dist = torch.cdist(normed, normed)
    nn_dist, nn_idx = dist.topk(11, dim=1, largest=False)
    print("neighbours", tuple(nn_idx[:, 1:].shape), "mean distance", round(nn_dist[:, 1:].mean().item(), 4))
    del capsule, received, again, normed, dist, nn_dist, nn_idx
del x, mask, lengths, emb
report("dlpack_handoff_patient_similarity")

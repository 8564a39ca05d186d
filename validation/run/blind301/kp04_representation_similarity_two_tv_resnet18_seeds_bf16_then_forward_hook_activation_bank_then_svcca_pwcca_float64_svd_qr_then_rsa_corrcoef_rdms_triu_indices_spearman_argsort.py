"""Do two networks trained from different seeds learn the same representations? SVCCA / PWCCA (Raghu et al.
2017, Morcos et al. 2018) and representational similarity analysis between two torchvision ResNet-18s,
everything computed on the GPU with torch.linalg.

Phases: (1) two `resnet18(num_classes=100)` from seeds 1 and 2, channels_last, bf16 autocast, SGD momentum
+ nesterov, 10 steps each at batch 128 on 96 x 96 synthetic images; (2) an activation bank: forward hooks
(`register_forward_hook`) on layer1..layer4 of both models under inference_mode over 4,096 images in
batches of 512, every map pooled to 2 x 2 (`adaptive_avg_pool2d`) and stored as (images x 4, channels)
float32; (3) SVCCA: float64, centred, `torch.linalg.svd(full_matrices=False)` keeping the top 50
directions (and the variance they hold), CCA by `torch.linalg.qr` of both reduced bases and the singular
values of Q1^T Q2, PWCCA weights from the projections, for all 16 layer pairs; (4) RSA: per layer and
model, the 2,048 x 2,048 dissimilarity matrix 1 - `torch.corrcoef` of image-mean features, the upper
triangle by `torch.triu_indices`, and the Spearman correlation of the two models' RDMs from ranks by a
double `argsort`, plus a whitened (`torch.cov`, `eigh`) linear regression of layer4 of one model onto the
other."""

import torch
import torch.nn.functional as F
from torchvision.models import resnet18

device = "cuda" if torch.cuda.is_available() else "cpu"
B, IMG, STEPS, BANK, BANK_B, RSA_N, SVD_DIRS = 128, 96, 10, 4096, 512, 2048, 50
LAYERS = ("layer1", "layer2", "layer3", "layer4")


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def train(seed):
    torch.manual_seed(seed)
    model = resnet18(num_classes=100).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    gen = torch.Generator(device=device).manual_seed(30104)
    for _ in range(STEPS):
        x = torch.randn(B, 3, IMG, IMG, device=device, generator=gen).to(memory_format=torch.channels_last)
        y = torch.randint(0, 100, (B,), device=device, generator=gen)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    print(f"seed {seed} loss {loss.item():.4f}")
    return model.eval()


# phase 1: two seeds
models = [train(1), train(2)]
report("phase 1 train two seeds")

# phase 2: activation bank through forward hooks
bank = {(m, name): [] for m in range(2) for name in LAYERS}
handles = []
for m, model in enumerate(models):
    for name in LAYERS:

        def hook(module, args, output, key=(m, name)):
            pooled = F.adaptive_avg_pool2d(output.float(), 2)
            bank[key].append(pooled.permute(0, 2, 3, 1).reshape(-1, pooled.shape[1]))

        handles.append(getattr(model, name).register_forward_hook(hook))
gen = torch.Generator(device=device).manual_seed(7)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(BANK // BANK_B):
        x = torch.randn(BANK_B, 3, IMG, IMG, device=device, generator=gen).to(
            memory_format=torch.channels_last
        )
        for model in models:
            model(x)
for h in handles:
    h.remove()
acts = {key: torch.cat(chunks) for key, chunks in bank.items()}
bank.clear()
print(f"bank {sum(a.numel() for a in acts.values()) * 4 / 2**20:.1f} MiB")
report("phase 2 activation bank")


# phase 3: SVCCA and PWCCA
def svd_reduce(a, directions=SVD_DIRS):
    a = a.double()
    a = a - a.mean(0)
    u, s, _vh = torch.linalg.svd(a, full_matrices=False)
    kept = (s[:directions] ** 2).sum() / (s**2).sum()
    return u[:, :directions] * s[:directions], a, kept


def pwcca(a, b):
    ra, a_centred, kept_a = svd_reduce(a)
    rb, _, kept_b = svd_reduce(b)
    qa, _ = torch.linalg.qr(ra)
    qb, _ = torch.linalg.qr(rb)
    u, rho, _vh = torch.linalg.svd(qa.T @ qb, full_matrices=False)
    k = rho.shape[0]
    h = qa @ u[:, :k]
    alpha = (h.T @ a_centred).abs().sum(1)
    return rho.mean(), (alpha / alpha.sum() * rho).sum(), torch.minimum(kept_a, kept_b)


with torch.no_grad():
    table = {}
    for la in LAYERS:
        for lb in LAYERS:
            table[la, lb] = [v.item() for v in pwcca(acts[0, la], acts[1, lb])]
print(" ".join(f"{la[-1]}{lb[-1]}:{v[0]:.2f}/{v[1]:.2f}/{v[2]:.2f}" for (la, lb), v in table.items()))
report("phase 3 svcca pwcca")


# phase 4: RSA with Spearman correlation of RDMs, and a whitened regression
def ranks(v):
    return torch.argsort(torch.argsort(v)).double()


with torch.no_grad():
    iu = torch.triu_indices(RSA_N, RSA_N, offset=1, device=device)
    rsa = {}
    for name in LAYERS:
        rdms = []
        for m in range(2):
            feats = acts[m, name].view(BANK, 4, -1).mean(1)[:RSA_N]
            rdms.append((1 - torch.corrcoef(feats))[iu[0], iu[1]])
        r0, r1 = ranks(rdms[0]), ranks(rdms[1])
        rsa[name] = torch.corrcoef(torch.stack([r0, r1]))[0, 1].item()
    a, b = acts[0, "layer4"].double(), acts[1, "layer4"].double()
    evals, evecs = torch.linalg.eigh(
        torch.cov(a.T) + 1e-6 * torch.eye(a.shape[1], dtype=torch.float64, device=device)
    )
    whiten = evecs @ torch.diag(evals.rsqrt()) @ evecs.T
    aw = (a - a.mean(0)) @ whiten
    coef = torch.linalg.lstsq(aw, b - b.mean(0)).solution
    r2 = 1 - ((aw @ coef - (b - b.mean(0))) ** 2).sum() / ((b - b.mean(0)) ** 2).sum()
print(" ".join(f"{k}:{v:.3f}" for k, v in rsa.items()) + f" layer4 r2 {r2.item():.3f}")
report("phase 4 rsa and regression")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")

"""Deep ensembles (Lakshminarayanan et al. 2017) of Kim-style text CNNs trained all at once with torch.func:
16 members (nn.Embedding 20,000 x 256, Conv1d 256 -> 192 with kernels 3, 4 and 5, ReLU, max over time,
dropout 0.5, linear to 5 classes) built separately, their parameters and buffers stacked by
`torch.func.stack_module_state`, the forward `torch.func.functional_call` on a meta-device base model
vmapped over members with `randomness="different"` (each member its own dropout masks).

Phase 1: 5 steps on bootstrap batches (each member its own batch of 64 sequences of 256 tokens,
in_dims (0, 0, 0)) with a fused torch.optim.Adam over the stacked leaves, fp32. Phase 2: no_grad ensemble
evaluation on a shared batch of 1,024 (in_dims (0, 0, None)): mean softmax, accuracy, predictive entropy,
expected member entropy and mutual information (BALD). Phase 3: a second ensemble of 32 members (new
stack_module_state) trained for 3 steps under bf16 autocast by `torch.func.grad_and_value` vmapped over
members on a shared batch of 128, the update by hand with torch._foreach_add_ on the stacked tensors
(SGD, lr 0.1). 3 phases."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

torch.manual_seed(22505)
device = "cuda"
VOCAB, EMB, FILTERS, KERNELS, NCLS, T = 20000, 256, 192, (3, 4, 5), 5, 256


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class TextCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, EMB)
        self.convs = nn.ModuleList(nn.Conv1d(EMB, FILTERS, k) for k in KERNELS)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(FILTERS * len(KERNELS), NCLS)

    def forward(self, ids):
        x = self.emb(ids).transpose(1, 2)
        x = torch.cat([F.relu(c(x)).amax(-1) for c in self.convs], 1)
        return self.fc(self.drop(x))


def make_ensemble(m):
    members = [TextCNN().to(device) for _ in range(m)]
    params, buffers = stack_module_state(members)
    base = copy.deepcopy(members[0]).to("meta")
    return params, buffers, base


def data(shape):
    ids = torch.randint(0, VOCAB, (*shape, T), device=device)
    return ids, (ids[..., :8].sum(-1) % NCLS)


M = 16
params, buffers, base = make_ensemble(M)
base.train()


def fmodel(p, b, ids):
    return functional_call(base, (p, b), (ids,))


opt = torch.optim.Adam(params.values(), lr=1e-3, fused=True)
for step in range(5):
    ids, y = data((M, 64))
    logits = vmap(fmodel, in_dims=(0, 0, 0), randomness="different")(params, buffers, ids)
    loss = F.cross_entropy(logits.reshape(-1, NCLS), y.reshape(-1)) * M
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"ensemble step {step} loss {loss.item() / M:.4f}")
report("bootstrap ensemble fp32 fused adam")

base.eval()
with torch.no_grad():
    ids, y = data((1024,))
    probs = vmap(fmodel, in_dims=(0, 0, None))(params, buffers, ids).softmax(-1)
    mean = probs.mean(0)
    acc = (mean.argmax(-1) == y).float().mean()
    pred_ent = -(mean * mean.clamp_min(1e-12).log()).sum(-1)
    exp_ent = -(probs * probs.clamp_min(1e-12).log()).sum(-1).mean(0)
    mi = pred_ent - exp_ent
print("acc", acc.item(), "entropy", pred_ent.mean().item(), "mutual information", mi.mean().item())
report("ensemble eval")

del params, buffers, opt, probs, mean, pred_ent, exp_ent, mi, logits, loss
M = 32
params, buffers, base = make_ensemble(M)
params = {k: v.detach() for k, v in params.items()}
base.train()


def member_loss(p, b, ids, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = functional_call(base, (p, b), (ids,))
    return F.cross_entropy(out.float(), y)


step_fn = vmap(grad_and_value(member_loss), in_dims=(0, 0, None, None), randomness="different")
for step in range(3):
    ids, y = data((128,))
    grads, losses = step_fn(params, buffers, ids, y)
    keys = list(params)
    torch._foreach_add_([params[k] for k in keys], [grads[k] for k in keys], alpha=-0.1)
    del grads
    print(f"bf16 step {step} mean loss {losses.mean().item():.4f}")
report("bf16 32-member grad_and_value")

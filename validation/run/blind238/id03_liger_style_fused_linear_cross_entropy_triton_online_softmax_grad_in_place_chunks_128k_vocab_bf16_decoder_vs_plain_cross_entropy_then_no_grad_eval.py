"""A Liger-style fused linear cross-entropy on a 128k vocabulary: the loss and its gradients computed in
chunks of tokens by a Triton kernel of its own, so the full logits never exist.

Kernel: per row of a chunk's bf16 logits, an online max / sum-exp over blocks of 4096 columns, then a
second pass writing (softmax - one_hot(target)) / n_valid over the logits in place and the row's loss
(logsumexp - logit[target]) / n_valid; rows whose target is -100 write zeros. FusedLinearCE (an autograd
Function) does, per chunk of 1024 tokens: logits = h @ W^T (bf16), the kernel, grad_h[chunk] = grad_logits
@ W, grad_W += grad_logits^T @ h (addmm into a bf16 buffer); forward returns the summed loss and keeps the
two gradients, which backward scales by the incoming gradient. Without grad, only the loss is computed.

Model: a decoder of 4 nn.TransformerEncoderLayer (d 1024, 16 heads, ffn 4096, norm_first, batch_first,
causal mask) in bf16, embeddings of 128,256 x 1024 and an untied LM head, AdamW, batch 8 x 1024 tokens,
12.5% of the targets -100. Phases: 2 steps with the plain F.cross_entropy over full fp32 logits; 3 steps
with the fused loss; a no_grad evaluation of the fused loss at batch 16; torch.cuda.empty_cache() and 2
fused steps at batch 12. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

torch.manual_seed(2383)
device = "cuda"
V, D, NL, S = 128256, 1024, 4, 1024
IGNORE = -100


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


@triton.jit
def ce_grad_kernel(logits_ptr, stride, target_ptr, loss_ptr, n_valid, n_cols, ignore_index,
                   WRITE_GRAD: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    logits_ptr += row * stride
    t = tl.load(target_ptr + row)
    if t == ignore_index:
        if WRITE_GRAD:
            for off in range(0, n_cols, BLOCK):
                cols = off + tl.arange(0, BLOCK)
                tl.store(logits_ptr + cols, tl.zeros((BLOCK,), dtype=tl.float32), mask=cols < n_cols)
        tl.store(loss_ptr + row, 0.0)
        return
    m = float("-inf")
    d = 0.0
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(logits_ptr + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    lse = m + tl.log(d)
    x_t = tl.load(logits_ptr + t).to(tl.float32)
    if WRITE_GRAD:
        for off in range(0, n_cols, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(logits_ptr + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
            g = tl.exp(x - lse)
            g = tl.where(cols == t, g - 1.0, g) / n_valid
            tl.store(logits_ptr + cols, g, mask=cols < n_cols)
    tl.store(loss_ptr + row, (lse - x_t) / n_valid)


class FusedLinearCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, target, chunk):
        bt, d = h.shape
        grads = h.requires_grad or weight.requires_grad
        n_valid = int(target.ne(IGNORE).sum().item())
        loss_rows = torch.zeros(bt, dtype=torch.float32, device=h.device)
        grad_h = torch.zeros_like(h) if grads else None
        grad_w = torch.zeros_like(weight) if grads else None
        for start in range(0, bt, chunk):
            end = min(start + chunk, bt)
            h_c = h[start:end]
            logits = h_c @ weight.t()
            ce_grad_kernel[(end - start,)](logits, logits.stride(0), target[start:end], loss_rows[start:end],
                                           n_valid, V, IGNORE, WRITE_GRAD=grads, BLOCK=4096, num_warps=16)
            if grads:
                torch.mm(logits, weight, out=grad_h[start:end])
                grad_w.addmm_(logits.t(), h_c)
            del logits
        ctx.save_for_backward(grad_h, grad_w)
        return loss_rows.sum()

    @staticmethod
    def backward(ctx, g):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * g.to(grad_h.dtype), grad_w * g.to(grad_w.dtype), None, None


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        layer = nn.TransformerEncoderLayer(D, 16, 4 * D, dropout=0.0, batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, NL, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def hidden(self, idx):
        mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[1], device=idx.device, dtype=torch.bfloat16)
        return self.norm(self.layers(self.embed(idx), mask=mask, is_causal=True))


model = Decoder().to(device=device, dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.1)


def batch(b):
    idx = torch.randint(0, V, (b, S), device=device)
    target = idx.roll(-1, dims=1)
    target[:, ::8] = IGNORE
    return idx, target


for step in range(2):
    idx, target = batch(8)
    logits = model.head(model.hidden(idx))
    loss = F.cross_entropy(logits.float().view(-1, V), target.view(-1), ignore_index=IGNORE)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"plain CE step {step} loss {loss.item():.4f}")
del idx, target, logits, loss
report("plain cross_entropy fp32 logits batch 8")

for step in range(3):
    idx, target = batch(8)
    h = model.hidden(idx).view(-1, D)
    loss = FusedLinearCE.apply(h, model.head.weight, target.view(-1), 1024)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"fused CE step {step} loss {loss.item():.4f}")
del idx, target, h, loss
report("fused linear cross-entropy chunks of 1024 batch 8")

model.eval()
with torch.no_grad():
    idx, target = batch(16)
    h = model.hidden(idx).view(-1, D)
    loss = FusedLinearCE.apply(h, model.head.weight, target.view(-1), 1024)
    print(f"eval fused CE {loss.item():.4f}")
del idx, target, h, loss
report("no_grad fused loss batch 16")

torch.cuda.empty_cache()
model.train()
for step in range(2):
    idx, target = batch(12)
    h = model.hidden(idx).view(-1, D)
    loss = FusedLinearCE.apply(h, model.head.weight, target.view(-1), 1024)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"fused CE batch 12 step {step} loss {loss.item():.4f}")
report("fused after empty_cache batch 12")

"""A mixture-of-experts decoder written the torchtitan way on PyTorch 2.10's public grouped GEMM:
`torch.nn.functional.grouped_mm` (new public API; `torch._grouped_mm` before). 6 layers of d 1,024,
16 heads (SDPA, causal), each MLP 16 experts of hidden 1,024 routed top-2 by a linear router
(softmax over the top-k scores), vocabulary 32,000, everything in pure bf16. The routed tokens are
sorted by expert (`argsort(stable=True)`), `histc` counts the tokens per expert and their `cumsum`
(int32) gives `offs`; the expert weights are stored (E, d_in, d_out) and multiplied as
`grouped_mm(x_sorted, w, offs=offs)` (gate and up, SiLU-gated), then the down projection, and the
weighted outputs are scattered back with `index_add_`. 6 training steps of batch 8 x 1,024 tokens,
fused AdamW; no_grad evaluation; then the optimizer is dropped and every expert weight quantized to
float8_e4m3fn with row-wise (per output channel) float32 scales, the bf16 expert weights deleted, and
inference under `torch.inference_mode()` through PyTorch 2.10's `torch.nn.functional.scaled_grouped_mm`
(`ScalingType.RowWise` for activations and weights; the activations quantized per token on the fly).
Token counts per expert vary with the router, but no tensor's size does (the routed rows are always
tokens x top-k). 4 phases."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2651)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


VOCAB, D, LAYERS, HEADS, E, TOPK, HID = 32000, 1024, 6, 16, 16, 2, 1024
B, T = 8, 1024


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D, E, bias=False)
        self.w_gate = nn.Parameter(torch.randn(E, D, HID) * D**-0.5)
        self.w_up = nn.Parameter(torch.randn(E, D, HID) * D**-0.5)
        self.w_down = nn.Parameter(torch.randn(E, HID, D) * HID**-0.5)
        self.fp8 = None

    def quantize(self):
        q = {}
        for name in ("w_gate", "w_up", "w_down"):
            w = getattr(self, name).detach()
            # per-expert, per-output-channel scales; the fp8 weight column-major in its last two dims
            wt = w.transpose(-2, -1).contiguous()  # (E, d_out, d_in)
            amax = wt.abs().amax(dim=-1).float().clamp(min=1e-12)
            scale = amax / torch.finfo(torch.float8_e4m3fn).max
            wq = (wt.float() / scale[..., None]).to(torch.float8_e4m3fn)
            q[name] = (wq.transpose(-2, -1), scale)
        self.fp8 = q
        del self.w_gate, self.w_up, self.w_down

    def _mm(self, x, name, offs):
        if self.fp8 is None:
            return F.grouped_mm(x, getattr(self, name), offs=offs)
        wq, ws = self.fp8[name]
        amax = x.abs().amax(dim=-1).float().clamp(min=1e-12)
        xs = amax / torch.finfo(torch.float8_e4m3fn).max
        xq = (x.float() / xs[:, None]).to(torch.float8_e4m3fn)
        return F.scaled_grouped_mm(
            xq,
            wq,
            xs,
            F.ScalingType.RowWise,
            ws,
            F.ScalingType.RowWise,
            offs=offs,
            output_dtype=torch.bfloat16,
        )

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, D)
        scores = self.router(x).float().softmax(dim=-1)
        top_w, top_i = scores.topk(TOPK, dim=-1)
        top_w = (top_w / top_w.sum(dim=-1, keepdim=True)).to(x.dtype)
        flat = top_i.reshape(-1)
        order = flat.argsort(stable=True)
        counts = torch.histc(flat.float(), bins=E, min=0, max=E - 1)
        offs = counts.cumsum(0).to(torch.int32)
        token = order // TOPK
        xs = x[token]
        h = F.silu(self._mm(xs, "w_gate", offs)) * self._mm(xs, "w_up", offs)
        y = self._mm(h, "w_down", offs) * top_w.reshape(-1)[order, None]
        return torch.zeros_like(x).index_add_(0, token, y).reshape(shape)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        self.n2 = nn.RMSNorm(D)
        self.moe = MoE()

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.moe(self.n2(x))


class MoEGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


model = MoEGPT().to(device=dev, dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
print(sum(p.numel() for p in model.parameters()) / 1e6, "M parameters")
report("model_built_bf16")

g = torch.Generator(device=dev).manual_seed(5)
for step in range(6):
    idx = torch.randint(0, VOCAB, (B, T + 1), device=dev, generator=g)
    logits = model(idx[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), idx[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
report("train_grouped_mm_6_steps")

model.eval()
with torch.no_grad():
    idx = torch.randint(0, VOCAB, (B, T + 1), device=dev, generator=g)
    loss = F.cross_entropy(model(idx[:, :-1]).reshape(-1, VOCAB).float(), idx[:, 1:].reshape(-1))
print("eval", round(loss.item(), 3))
report("no_grad_eval")

del opt, logits, loss
for blk in model.blocks:
    blk.moe.quantize()
with torch.inference_mode():
    for _ in range(3):
        idx = torch.randint(0, VOCAB, (16, T), device=dev, generator=g)
        out = model(idx)[:, -1].argmax(-1)
print(out[:4].tolist())
report("fp8_rowwise_scaled_grouped_mm_inference")

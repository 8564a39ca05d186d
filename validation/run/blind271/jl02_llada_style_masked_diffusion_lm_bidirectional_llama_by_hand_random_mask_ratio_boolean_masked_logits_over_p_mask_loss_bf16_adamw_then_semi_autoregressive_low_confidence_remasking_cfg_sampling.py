"""A masked diffusion language model trained and sampled the way LLaDA's reference code does it
(ML-GSAI/LLaDA: GUIDELINES.md's `forward_process` and loss, generate.py's `generate`): a LLaMA-style
transformer written by hand without a causal mask (12 layers of d 1,024, 16 heads with RoPE, SwiGLU
2,816, RMSNorm), vocabulary 32,000 whose last id is the [MASK] token. Training: per sequence a mask
ratio t ~ U(0, 1) (`p_mask = (1 - eps) * t + eps`, repeated over the length), each token masked where
`torch.rand((b, l)) < p_mask`, the noisy batch by `torch.where`, and the loss as LLaDA writes it,
`F.cross_entropy(logits[masked_indices], input_ids[masked_indices], reduction="none")` over
`p_mask[masked_indices]`, summed over (b * l) -- a boolean index whose row count is what the CUDA
generator drew (the same on every run of the GPU; no other value-dependent size). bf16 autocast, fused
AdamW with clipping, 6 steps of 8 x 2,048 tokens. Then a no_grad evaluation at fixed ratios (t = 0.25,
0.5, 0.75, the same mask count rule). Then sampling under inference_mode as generate.py: a 128-token
prompt and 256 [MASK] positions, semi-autoregressive blocks of 64, 64 steps (4 tokens unmasked per step
per sequence: `get_num_transfer_tokens`), classifier-free guidance 1.5 (the prompt masked out for the
unconditional half, the batch doubled by `torch.cat`), temperature 0 (argmax), low-confidence remasking
(`torch.gather` of the softmax at the argmax, positions past the block set to -inf, `torch.topk` per
sequence, then `x[transfer_index] = x0[transfer_index]`: always exactly 4 per sequence). Batch 8
prompts. 3 phases and the end."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2712)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


VOCAB, MASK_ID, D, LAYERS, HEADS, FF = 32000, 31999, 1024, 12, 16, 2816
B, L = 8, 2048
HD = D // HEADS


def rope_cache(n):
    inv = 1.0 / (500000.0 ** (torch.arange(0, HD, 2, device=dev).float() / HD))
    f = torch.outer(torch.arange(n, device=dev).float(), inv)
    return f.cos(), f.sin()


def apply_rope(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = nn.RMSNorm(D)
        self.q = nn.Linear(D, D, bias=False)
        self.k = nn.Linear(D, D, bias=False)
        self.v = nn.Linear(D, D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.ff_norm = nn.RMSNorm(D)
        self.gate = nn.Linear(D, FF, bias=False)
        self.up = nn.Linear(D, FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = apply_rope(self.q(h).view(b, t, HEADS, HD).transpose(1, 2), cos, sin)
        k = apply_rope(self.k(h).view(b, t, HEADS, HD).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, t, HEADS, HD).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v)  # bidirectional: no causal mask
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        h = self.ff_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LLaDA(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(D)
        self.ff_out = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx):
        cos, sin = rope_cache(idx.shape[1])
        x = self.wte(idx)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return self.ff_out(self.norm(x))


def forward_process(input_ids, eps=1e-3, t=None):
    b, l = input_ids.shape  # noqa: E741 (LLaDA's names)
    if t is None:
        t = torch.rand(b, device=input_ids.device)
    p_mask = (1 - eps) * t + eps
    p_mask = p_mask[:, None].repeat(1, l)
    masked_indices = torch.rand((b, l), device=input_ids.device) < p_mask
    noisy_batch = torch.where(masked_indices, MASK_ID, input_ids)
    return noisy_batch, masked_indices, p_mask


def diffusion_loss(model, input_ids, t=None):
    noisy_batch, masked_indices, p_mask = forward_process(input_ids, t=t)
    logits = model(noisy_batch)
    token_loss = (
        F.cross_entropy(logits[masked_indices].float(), input_ids[masked_indices], reduction="none")
        / p_mask[masked_indices]
    )
    return token_loss.sum() / (input_ids.shape[0] * input_ids.shape[1])


model = LLaDA().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=4e-4, weight_decay=0.1, betas=(0.9, 0.95), fused=True)
print(sum(p.numel() for p in model.parameters()) / 1e6, "M parameters")
report("model_built_fp32")

g = torch.Generator(device=dev).manual_seed(12)
for step in range(6):
    input_ids = torch.randint(0, VOCAB - 1, (B, L), device=dev, generator=g)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = diffusion_loss(model, input_ids)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 4))
report("train_masked_diffusion_6_steps")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    input_ids = torch.randint(0, VOCAB - 1, (B, L), device=dev, generator=g)
    for t in (0.25, 0.5, 0.75):
        tt = torch.full((B,), t, device=dev)
        print("eval t", t, round(diffusion_loss(model, input_ids, t=tt).item(), 4))
report("no_grad_eval_three_ratios")


def get_num_transfer_tokens(mask_index, steps):
    mask_num = mask_index.sum(dim=1, keepdim=True)
    base = mask_num // steps
    remainder = mask_num % steps
    num_transfer_tokens = (
        torch.zeros(mask_num.size(0), steps, device=mask_index.device, dtype=torch.int64) + base
    )
    for i in range(mask_num.size(0)):
        num_transfer_tokens[i, : remainder[i]] += 1
    return num_transfer_tokens


@torch.inference_mode()
def generate(model, prompt, steps=64, gen_length=256, block_length=64, cfg_scale=1.5):
    x = torch.full((prompt.shape[0], prompt.shape[1] + gen_length), MASK_ID, dtype=torch.long, device=dev)
    x[:, : prompt.shape[1]] = prompt.clone()
    prompt_index = x != MASK_ID
    num_blocks = gen_length // block_length
    steps = steps // num_blocks
    for num_block in range(num_blocks):
        lo = prompt.shape[1] + num_block * block_length
        block_mask_index = x[:, lo : lo + block_length] == MASK_ID
        num_transfer_tokens = get_num_transfer_tokens(block_mask_index, steps)
        for i in range(steps):
            mask_index = x == MASK_ID
            un_x = x.clone()
            un_x[prompt_index] = MASK_ID
            x_ = torch.cat([x, un_x], dim=0)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(x_)
            logits, un_logits = torch.chunk(logits, 2, dim=0)
            logits = un_logits + (cfg_scale + 1) * (logits - un_logits)
            x0 = torch.argmax(logits, dim=-1)  # temperature 0: no Gumbel noise
            p = F.softmax(logits.to(torch.float64), dim=-1)
            x0_p = torch.squeeze(torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)
            x0_p[:, lo + block_length :] = -float("inf")
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, -float("inf"))
            transfer_index = torch.zeros_like(x0, dtype=torch.bool, device=x0.device)
            for j in range(confidence.shape[0]):
                _, select_index = torch.topk(confidence[j], k=num_transfer_tokens[j, i])
                transfer_index[j, select_index] = True
            x[transfer_index] = x0[transfer_index]
    return x


prompt = torch.randint(0, VOCAB - 1, (8, 128), device=dev, generator=g)
out = generate(model, prompt)
print("sampled", tuple(out.shape), int((out == MASK_ID).sum()), int(out[:, -1].sum()))
report("inference_mode_semi_ar_cfg_sampling")
print("done")

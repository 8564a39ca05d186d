"""Megatron-style mixed precision written by hand around a GPT-NeoX model from GPTNeoXConfig (1,536
wide, 12 layers, 12 heads, MLP of 6,144, rotary on a quarter of each head, vocabulary 50,304, SDPA):
the bf16 weights are moved into one flat bf16 buffer (every parameter's .data a view of it), a flat
fp32 main_grad buffer holds each parameter's gradient as a view, and a
register_post_accumulate_grad_hook on every parameter adds the bf16 .grad into its fp32 main_grad
and drops it, so gradients accumulate in fp32 over 4 micro-batches of 4 x 1,024 tokens; a flat fp32
master copy of the weights with the main_grad buffer as its .grad is clipped and stepped by one
fused AdamW, then copied into the flat bf16 buffer, and main_grad is zeroed. The labels are -100
over every example's prompt (a random 96..640 tokens) so only the response is learned. 3 steps, then
a greedy decode of 64 tokens for 16 prompts of 256 tokens with the model's KV cache, fed back a
token at a time under no_grad; 5 phases."""

import os

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15306)
if SMALL:
    cfg = GPTNeoXConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=256,
    )
    B, T, ACC, PMIN, PMAX, NP, PLEN, NEW = 2, 64, 2, 8, 40, 4, 16, 8
else:
    cfg = GPTNeoXConfig(
        vocab_size=50304,
        hidden_size=1536,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=6144,
        rotary_pct=0.25,
        max_position_embeddings=2048,
    )
    B, T, ACC, PMIN, PMAX, NP, PLEN, NEW = 4, 1024, 4, 96, 640, 16, 256, 64
cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"

model = GPTNeoXForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
params = [p for p in model.parameters() if p.requires_grad]
total = sum(p.numel() for p in params)
flat_bf16 = torch.empty(total, dtype=torch.bfloat16, device=device)
main_grad = torch.zeros(total, dtype=torch.float32, device=device)
offset = 0
for p in params:
    n = p.numel()
    flat_bf16[offset : offset + n].copy_(p.data.view(-1))
    p.data = flat_bf16[offset : offset + n].view_as(p)
    p.main_grad = main_grad[offset : offset + n].view_as(p)
    offset += n


def accumulate_into_main_grad(p):
    p.main_grad.add_(p.grad)
    p.grad = None


for p in params:
    p.register_post_accumulate_grad_hook(accumulate_into_main_grad)

master = flat_bf16.detach().float().requires_grad_(True)
master.grad = main_grad
opt = torch.optim.AdamW([master], lr=1e-5, betas=(0.9, 0.95), weight_decay=0.0, fused=device == "cuda")
if device == "cuda":
    print(f"params {total} allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def sft_batch():
    ids = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    prompt = torch.randint(PMIN, PMAX + 1, (B, 1), device=device)
    labels = ids.masked_fill(torch.arange(T, device=device)[None, :] < prompt, -100)
    return ids, labels


model.train()
for step in range(3):
    for _ in range(ACC):
        ids, labels = sft_batch()
        loss = model(input_ids=ids, labels=labels).loss
        (loss / ACC).backward()
    torch.nn.utils.clip_grad_norm_([master], 1.0)
    opt.step()
    with torch.no_grad():
        flat_bf16.copy_(master)
    main_grad.zero_()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    prompts = torch.randint(0, cfg.vocab_size, (NP, PLEN), device=device)
    out = model(input_ids=prompts, use_cache=True)
    past = out.past_key_values
    tok = out.logits[:, -1].argmax(-1, keepdim=True)
    generated = [tok]
    for _ in range(NEW - 1):
        out = model(input_ids=tok, past_key_values=past, use_cache=True)
        past = out.past_key_values
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        generated.append(tok)
    text = torch.cat(generated, dim=1)
if device == "cuda":
    print(
        f"decoded {tuple(text.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )

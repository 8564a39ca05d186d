"""Qwen3ForCausalLM from a config, pre-trained with transformers' Adafactor.

Model: Qwen3Config with 12 layers of 1024, 16 query heads and 8 key/value heads of 128 (per-head
RMSNorm on q and k), SwiGLU 3072, vocabulary 151,936 tied to the embedding, sdpa attention; fp32
weights.

Phases: the first step at batch 8 x 1024 under bf16 autocast with HF gradient checkpointing
(use_reentrant False) and transformers.optimization.Adafactor (factored second moments, lr 1e-3,
scale_parameter and relative_step off, clip_threshold 1.0); 3 more steps; evaluation loss under
inference_mode and greedy generate() of 16 new tokens from 4 prompts of 256; then the optimizer
dropped, empty_cache(), the model cast to bf16, checkpointing disabled and a new Adafactor with its
relative step, parameter scaling and warmup_init (bf16 weights: Adafactor updates fp32 copies) at
batch 4, 3 steps. 4 phases."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.optimization import Adafactor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2143)
if SMALL:
    cfg = dict(
        vocab_size=512,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=256,
    )
    CTX, BATCH, PROMPT, NEW = 64, 2, 16, 4
else:
    cfg = dict(
        vocab_size=151936,
        hidden_size=1024,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=3072,
    )
    CTX, BATCH, PROMPT, NEW = 1024, 8, 256, 16
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


config = Qwen3Config(
    **cfg,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    rms_norm_eps=1e-6,
    attn_implementation="sdpa",
)
model = Qwen3ForCausalLM(config).to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
opt = Adafactor(
    model.parameters(),
    lr=1e-3,
    scale_parameter=False,
    relative_step=False,
    warmup_init=False,
    clip_threshold=1.0,
    weight_decay=0.0,
)


def step(batch, autocast):
    ids = torch.randint(0, config.vocab_size, (batch, CTX), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"step 0 loss {step(BATCH, amp):.4f}")
report("first step")
for _ in range(3):
    loss = step(BATCH, amp)
print(f"step 3 loss {loss:.4f}")
report("train")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    ids = torch.randint(0, config.vocab_size, (BATCH, CTX), device=device)
    print(f"eval loss {model(input_ids=ids, labels=ids).loss.item():.4f}")
    prompts = torch.randint(0, config.vocab_size, (4, PROMPT), device=device)
    out = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        use_cache=True,
        pad_token_id=0,
    )
    print(f"generated {tuple(out.shape)}")
report("eval")

del opt
torch.cuda.empty_cache()
model.train()
model.gradient_checkpointing_disable()
model.to(torch.bfloat16)
opt = Adafactor(model.parameters(), lr=None, scale_parameter=True, relative_step=True, warmup_init=True)
for i in range(3):
    print(f"bf16 step {i} loss {step(BATCH // 2, False):.4f}")
report("bf16 adafactor")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")

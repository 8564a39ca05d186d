"""A Compound Word Transformer (Hsiao et al. 2021, "CP Word") for pop-piano music on a transformers
LlamaModel backbone built from a LlamaConfig (no downloads): every compound token groups seven token
families — type (4), beat (17), tempo (58), chord (135), pitch (87), duration (18), velocity (25) — each
with its own nn.Embedding (sizes 32 to 512 as in the paper's table), the seven family embeddings
projected to d_model by their own linear layers and summed per token, fed as inputs_embeds. The
backbone: 12 layers, hidden 1,024, 16 heads, SwiGLU 2,816, RoPE, RMSNorm, the default attention
implementation; seven output heads (one linear per family) on the final hidden states, the loss the sum
of the seven cross-entropies.

The whole model is cast to bfloat16 (.bfloat16(), no autocast) and trained with transformers'
Adafactor (lr 1e-3, relative_step False, scale_parameter False, warmup_init False) with gradient
checkpointing on the backbone (gradient_checkpointing_enable, use_reentrant False) at batch 32 x 1,024
compound tokens (random families made on the device). Phases: the first step; 2 more; evaluation under
torch.inference_mode at batch 32 (checkpointing off in eval); then sampling with the backbone's KV cache
(use_cache, past_key_values): 8 primers of 64 compound tokens, 128 new ones, every family drawn by
nucleus sampling (top-p 0.9, temperature 1.2) from its head, the sampled families embedded and fed
back one token at a time. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaModel
from transformers.optimization import Adafactor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19105)
if SMALL:
    LAYERS, HIDDEN, HEADS, FFN, B, L, STEPS, EVAL_B, GEN_B, PRIMER, NEW = 2, 64, 4, 128, 2, 32, 1, 2, 2, 8, 4
else:
    LAYERS, HIDDEN, HEADS, FFN, B, L, STEPS, EVAL_B, GEN_B, PRIMER, NEW = (
        12,
        1024,
        16,
        2816,
        32,
        1024,
        2,
        32,
        8,
        64,
        128,
    )
FAMILIES = {
    "token_type": (4, 32),
    "beat": (17, 64),
    "tempo": (58, 128),
    "chord": (135, 256),
    "pitch": (87, 512),
    "duration": (18, 128),
    "velocity": (25, 128),
}
device = "cuda" if torch.cuda.is_available() else "cpu"


class CPTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeds = nn.ModuleDict({k: nn.Embedding(n, e) for k, (n, e) in FAMILIES.items()})
        self.projs = nn.ModuleDict({k: nn.Linear(e, HIDDEN) for k, (n, e) in FAMILIES.items()})
        cfg = LlamaConfig(
            vocab_size=8,
            hidden_size=HIDDEN,
            intermediate_size=FFN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=HEADS,
            max_position_embeddings=4096,
            rope_theta=10000.0,
        )
        self.backbone = LlamaModel(cfg)
        self.heads = nn.ModuleDict({k: nn.Linear(HIDDEN, n) for k, (n, e) in FAMILIES.items()})

    def embed(self, tokens):
        # tokens: (b, n, 7) family indices
        x = 0
        for i, k in enumerate(FAMILIES):
            x = x + self.projs[k](self.embeds[k](tokens[..., i]))
        return x

    def forward(self, tokens, past_key_values=None, use_cache=False):
        out = self.backbone(
            inputs_embeds=self.embed(tokens), past_key_values=past_key_values, use_cache=use_cache
        )
        h = out.last_hidden_state
        return {k: self.heads[k](h) for k in FAMILIES}, out.past_key_values


def random_cp(b, n):
    return torch.stack([torch.randint(0, v, (b, n), device=device) for v, _ in FAMILIES.values()], dim=-1)


def cp_loss(logits, targets):
    return sum(
        F.cross_entropy(logits[k].float().reshape(-1, n), targets[..., i].reshape(-1))
        for i, (k, (n, _)) in enumerate(FAMILIES.items())
    )


model = CPTransformer().to(device).bfloat16()
model.backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = Adafactor(model.parameters(), lr=1e-3, relative_step=False, scale_parameter=False, warmup_init=False)


def train_step():
    seq = random_cp(B, L + 1)
    logits, _ = model(seq[:, :-1])
    loss = cp_loss(logits, seq[:, 1:])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


model.train()
print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    print(f"step {step} loss {train_step():.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode():
    seq = random_cp(EVAL_B, L + 1)
    logits, _ = model(seq[:, :-1])
    eval_loss = cp_loss(logits, seq[:, 1:])
print(f"eval loss {eval_loss.item():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
del logits, seq


def nucleus(logits, p=0.9, temperature=1.2):
    probs = F.softmax(logits.float() / temperature, dim=-1)
    sorted_probs, idx = torch.sort(probs, descending=True, dim=-1)
    cum = sorted_probs.cumsum(-1)
    sorted_probs = sorted_probs.masked_fill(cum - sorted_probs > p, 0.0)
    choice = torch.multinomial(sorted_probs / sorted_probs.sum(-1, keepdim=True), 1)
    return idx.gather(-1, choice)


with torch.inference_mode():
    tokens = random_cp(GEN_B, PRIMER)
    logits, past = model(tokens, use_cache=True)
    out = [tokens]
    for _ in range(NEW):
        nxt = torch.stack([nucleus(logits[k][:, -1]) for k in FAMILIES], dim=-1)
        out.append(nxt)
        logits, past = model(nxt, past_key_values=past, use_cache=True)
    song = torch.cat(out, dim=1).cpu()
print(f"sampled {tuple(song.shape)}")
if device == "cuda":
    print(f"sampling peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")

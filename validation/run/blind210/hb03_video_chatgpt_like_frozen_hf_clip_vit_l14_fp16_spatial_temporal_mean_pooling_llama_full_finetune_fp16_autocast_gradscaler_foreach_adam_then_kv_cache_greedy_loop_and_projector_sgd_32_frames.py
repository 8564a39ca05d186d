"""A Video-ChatGPT-like video LLM by hand, on random frames and random tokens.

Vision: a CLIPVisionModel from CLIPVisionConfig at ViT-L/14's size (24 layers of 1024, 224 px -> 256
patches + CLS), frozen, in fp16, run under no_grad with output_hidden_states; the penultimate layer's
patch tokens are pooled over time (256 spatial tokens) and over space (one temporal token a frame),
concatenated, and mapped by a Linear projector into the LLM.
LLM: a LlamaForCausalLM from LlamaConfig (16 layers of 2048, 32 heads, 4 key/value heads, SwiGLU 5632,
vocabulary 32,000), fp32 weights.
Phase 1: full fine-tuning of projector and LLM on 4 videos x 16 frames (272 video tokens, 32 prompt
tokens before them and 96 answer tokens after, labels on the answer) under fp16 autocast with a
GradScaler and foreach Adam, 3 steps.
Phase 2: greedy decoding of 48 tokens by hand at batch 8 under inference_mode and fp16 autocast:
prefill from inputs_embeds, then one token a step with the DynamicCache (past_key_values).
Phase 3: the optimizer and scaler deleted, empty_cache(), the LLM halved (.half()) and frozen; only the
projector trained (stage-1 alignment) with SGD momentum on 8 videos x 32 frames (CLIP run over chunks of
64 frames), spatial tokens 2x2 average-pooled (64) plus 32 temporal tokens; gradients flow through the
frozen fp16 LLM into the projector. 3 phases after the models'."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import CLIPVisionConfig, CLIPVisionModel, LlamaConfig, LlamaForCausalLM

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21003)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
vdtype = torch.float16 if amp else torch.float32
if SMALL:
    vcfg = CLIPVisionConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=56,
        patch_size=14,
    )
    lcfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    B1, T1, B2, B3, T3, PROMPT, ANSWER, NEW, CHUNK = 2, 4, 2, 2, 8, 8, 8, 4, 8
else:
    vcfg = CLIPVisionConfig(
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=24,
        num_attention_heads=16,
        image_size=224,
        patch_size=14,
    )
    lcfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=4,
        max_position_embeddings=2048,
    )
    B1, T1, B2, B3, T3, PROMPT, ANSWER, NEW, CHUNK = 4, 16, 8, 8, 32, 32, 96, 48, 64
lcfg.pad_token_id = 0
vcfg._attn_implementation = "sdpa"
SIDE = vcfg.image_size // vcfg.patch_size


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


clip = CLIPVisionModel(vcfg).to(device=device, dtype=vdtype).eval().requires_grad_(False)
llm = LlamaForCausalLM(lcfg).to(device)
projector = nn.Linear(vcfg.hidden_size, lcfg.hidden_size).to(device)
embed = llm.get_input_embeddings()
report("models")


@torch.no_grad()
def frame_features(frames):
    """frames (B, T, 3, H, W) -> penultimate patch tokens (B, T, P, D), CLIP run CHUNK frames at a time."""
    b, t = frames.shape[:2]
    flat = frames.flatten(0, 1)
    feats = []
    for i in range(0, flat.shape[0], CHUNK):
        out = clip(pixel_values=flat[i : i + CHUNK], output_hidden_states=True)
        feats.append(out.hidden_states[-2][:, 1:])
    return torch.cat(feats).view(b, t, SIDE * SIDE, -1)


def video_tokens(feats, pool_space=False):
    temporal = feats.mean(dim=2)  # (B, T, D)
    spatial = feats.mean(dim=1)  # (B, P, D)
    if pool_space:
        b, _p, d = spatial.shape
        grid = spatial.transpose(1, 2).reshape(b, d, SIDE, SIDE)
        spatial = F.avg_pool2d(grid, 2).flatten(2).transpose(1, 2)
    return torch.cat([temporal, spatial], dim=1)


def make_inputs(b, t, answer=True, pool_space=False):
    frames = torch.randn(b, t, 3, vcfg.image_size, vcfg.image_size, device=device, dtype=vdtype)
    feats = frame_features(frames)
    prompt = torch.randint(3, lcfg.vocab_size, (b, PROMPT), device=device)
    vid = projector(video_tokens(feats, pool_space).float())
    parts = [embed(prompt).to(vid.dtype), vid]
    labels = None
    if answer:
        ans = torch.randint(3, lcfg.vocab_size, (b, ANSWER), device=device)
        parts.append(embed(ans).to(vid.dtype))
        ignore = torch.full((b, PROMPT + vid.shape[1]), -100, device=device, dtype=torch.long)
        labels = torch.cat([ignore, ans], dim=1)
    return torch.cat(parts, dim=1), labels


# phase 1: full fine-tuning, fp16 autocast, GradScaler, foreach Adam
params = list(projector.parameters()) + list(llm.parameters())
opt = torch.optim.Adam(params, lr=2e-5, foreach=True)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
llm.train()
for step in range(3):
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        embeds, labels = make_inputs(B1, T1)
        loss = llm(inputs_embeds=embeds, labels=labels).loss
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
del embeds, labels, loss
report("full fine-tune fp16 autocast gradscaler foreach adam")

# phase 2: greedy decoding by hand with the KV cache
llm.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    embeds, _ = make_inputs(B2, T1, answer=False)
    out = llm(inputs_embeds=embeds, use_cache=True)
    cache = out.past_key_values
    token = out.logits[:, -1].argmax(-1, keepdim=True)
    generated = [token]
    for _ in range(NEW - 1):
        out = llm(input_ids=token, past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        generated.append(token)
    tokens = torch.cat(generated, dim=1)
print(f"decoded {tuple(tokens.shape)}")
del out, cache, embeds, tokens, generated, token
report("kv-cache greedy decode by hand")

# phase 3: the LLM halved and frozen, projector-only SGD on 32 frames with 2x2 spatial pooling
del opt, scaler, params
if device == "cuda":
    torch.cuda.empty_cache()
llm.half().requires_grad_(False)
llm.train()
opt = torch.optim.SGD(projector.parameters(), lr=1e-3, momentum=0.9)
for step in range(2):
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        embeds, labels = make_inputs(B3, T3, pool_space=True)
        loss = llm(inputs_embeds=embeds.to(llm.dtype) if not amp else embeds, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"projector step {step} loss {loss.item():.4f}")
report("projector-only sgd, halved frozen llm, 32 frames")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")

"""LLaVA-1.5's two training stages written by hand around Hugging Face models (after haotian-liu/LLaVA's
LlavaMetaForCausalLM.prepare_inputs_labels_for_multimodal): a CLIPVisionModel from config (ViT-L/14
at 336 x 336: 576 patches + CLS, 1,024 wide, 24 layers) kept frozen and run under no_grad, its
penultimate hidden state (output_hidden_states, select_layer -2) with the CLS dropped; the
`mlp2x_gelu` projector (Linear 1,024 -> 2,048, GELU, Linear 2,048 -> 2,048); a LlamaForCausalLM
from LlamaConfig (TinyLlama-1.1B-sized: 2,048 wide, 22 layers, 32 heads with 4 KV heads, MLP 5,632,
vocabulary 32,000); everything in bf16. Each sample's 576 image features are spliced into its
token embeddings (a prompt of 8 tokens, the image, then the caption/answer) and the whole goes in
through `inputs_embeds`, labels -100 over the prompt and the image. Stage 1 (feature alignment): the
LM frozen, AdamW on the projector only (lr 1e-3), batch 16 x (8 + 576 + 56 tokens), 2 steps each
its own phase; stage 2 (visual instruction tuning): the LM unfrozen with `gradient_checkpointing_enable()`
(non-reentrant) and `enable_input_require_grads`-free (the projector's output carries grad), AdamW
(foreach, lr 2e-5, weight decay 0) over projector and LM, batch 8 x (8 + 576 + 184 tokens), 2 steps
each its own phase; then greedy `generate(inputs_embeds=...)` of 32 tokens (min_new_tokens 32) for
8 images under no_grad; 6 phases."""

import os

import torch
import torch.nn as nn
from transformers import CLIPVisionConfig, CLIPVisionModel, LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16703)
if SMALL:
    vcfg = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        image_size=56,
        patch_size=14,
    )
    lcfg = LlamaConfig(
        vocab_size=320,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    B1, T1, B2, T2, PROMPT, GEN, NEW = 4, 12, 2, 20, 4, 2, 4
else:
    vcfg = CLIPVisionConfig(
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=24,
        num_attention_heads=16,
        image_size=336,
        patch_size=14,
        projection_dim=768,
    )
    lcfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=22,
        num_attention_heads=32,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
    )
    B1, T1, B2, T2, PROMPT, GEN, NEW = 16, 56, 8, 184, 8, 8, 32
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16
vision = CLIPVisionModel(vcfg).to(device=device, dtype=dtype).eval()
vision.requires_grad_(False)
projector = nn.Sequential(
    nn.Linear(vcfg.hidden_size, lcfg.hidden_size), nn.GELU(), nn.Linear(lcfg.hidden_size, lcfg.hidden_size)
).to(device=device, dtype=dtype)
llm = LlamaForCausalLM(lcfg).to(device=device, dtype=dtype)
N_IMG = (vcfg.image_size // vcfg.patch_size) ** 2
IGNORE = -100


def phase(name):
    if device == "cuda":
        print(f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def encode_images(pixels):
    with torch.no_grad():
        out = vision(pixel_values=pixels, output_hidden_states=True)
        feats = out.hidden_states[-2][:, 1:]
    return projector(feats)


def batch(n, text_len):
    pixels = torch.randn(n, 3, vcfg.image_size, vcfg.image_size, device=device, dtype=dtype)
    prompt = torch.randint(3, lcfg.vocab_size, (n, PROMPT), device=device)
    text = torch.randint(3, lcfg.vocab_size, (n, text_len), device=device)
    return pixels, prompt, text


def prepare(pixels, prompt, text):
    image_embeds = encode_images(pixels)
    embed = llm.get_input_embeddings()
    inputs_embeds = torch.cat([embed(prompt), image_embeds, embed(text)], dim=1)
    n = prompt.shape[0]
    labels = torch.cat(
        [torch.full((n, PROMPT + N_IMG), IGNORE, device=device, dtype=torch.long), text], dim=1
    )
    attention_mask = torch.ones(labels.shape, device=device, dtype=torch.long)
    return inputs_embeds, attention_mask, labels


phase("model")
# Stage 1: feature alignment, projector only
llm.requires_grad_(False)
optimizer = torch.optim.AdamW(projector.parameters(), lr=1e-3, weight_decay=0.0)
llm.train()
for step in range(2):
    inputs_embeds, attention_mask, labels = prepare(*batch(B1, T1))
    loss = llm(inputs_embeds=inputs_embeds, attention_mask=attention_mask, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"stage1 step {step} loss {loss.item():.4f}")
    del inputs_embeds, attention_mask, labels, loss
    phase(f"stage1 step {step}")

# Stage 2: instruction tuning, projector + LM
del optimizer
llm.requires_grad_(True)
llm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
optimizer = torch.optim.AdamW(
    list(projector.parameters()) + list(llm.parameters()), lr=2e-5, weight_decay=0.0
)
for step in range(2):
    inputs_embeds, attention_mask, labels = prepare(*batch(B2, T2))
    loss = llm(inputs_embeds=inputs_embeds, attention_mask=attention_mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(projector.parameters()) + list(llm.parameters()), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"stage2 step {step} loss {loss.item():.4f}")
    del inputs_embeds, attention_mask, labels, loss
    phase(f"stage2 step {step}")

llm.eval()
with torch.no_grad():
    pixels, prompt, _ = batch(GEN, 0)
    embed = llm.get_input_embeddings()
    inputs_embeds = torch.cat([embed(prompt), encode_images(pixels)], dim=1)
    attention_mask = torch.ones(inputs_embeds.shape[:2], device=device, dtype=torch.long)
    out = llm.generate(
        inputs_embeds=inputs_embeds,
        attention_mask=attention_mask,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
    )
    print(f"generated {tuple(out.shape)}")
phase("generate")

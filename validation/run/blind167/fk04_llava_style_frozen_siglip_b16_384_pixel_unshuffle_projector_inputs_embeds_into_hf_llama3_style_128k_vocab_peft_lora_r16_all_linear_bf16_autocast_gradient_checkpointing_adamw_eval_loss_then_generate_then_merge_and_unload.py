"""A LLaVA-style vision-language model with LoRA fine-tuning of the language model, written by hand
around Hugging Face models as Idefics3/SmolVLM-style recipes do: a SiglipVisionModel from config
(ViT-B/16 at 384 x 384: 576 patches, 768 wide, 12 layers, no pooling head) frozen in bf16 under
no_grad; a pixel-unshuffle connector (the 24 x 24 grid regrouped 2 x 2 into 144 tokens of 3,072, then
Linear 3,072 -> 2,048, fp32, trained); a LlamaForCausalLM from LlamaConfig (Llama-3.2-1B-shaped:
2,048 wide, 16 layers, 32 heads with 8 KV heads, MLP 8,192, vocabulary 128,256, rope theta 500,000,
tied embeddings) in bf16 wrapped by peft's LoRA (r 16, alpha 32, dropout 0.05 on q/k/v/o and
gate/up/down; the adapters kept fp32), `gradient_checkpointing_enable` (non-reentrant) on the LM;
each sample is 16 prompt tokens, the 144 image tokens, then 352 answer tokens, put in through
`inputs_embeds`, labels -100 on prompt and image; bf16 autocast, AdamW (foreach, lr 2e-4) on the
LoRA weights and the connector, batch 8, 2 steps each its own phase; then a validation loss under
no_grad at batch 16; greedy `generate(inputs_embeds=...)` of 48 tokens for 8 images with the KV
cache; then `merge_and_unload()` and the same generation again; 6 phases."""

import os

import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM, SiglipVisionConfig, SiglipVisionModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16704)
if SMALL:
    vcfg = SiglipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=64,
        patch_size=16,
        vision_use_head=False,
    )
    lcfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    B, EVAL_B, PROMPT, ANSWER, GEN, NEW = 2, 4, 4, 12, 2, 4
else:
    vcfg = SiglipVisionConfig(
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        image_size=384,
        patch_size=16,
        vision_use_head=False,
    )
    lcfg = LlamaConfig(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
    )
    B, EVAL_B, PROMPT, ANSWER, GEN, NEW = 8, 16, 16, 352, 8, 48
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")
GRID = vcfg.image_size // vcfg.patch_size
SCALE = 2
N_IMG = (GRID // SCALE) ** 2
IGNORE = -100

vision = SiglipVisionModel(vcfg).to(device=device, dtype=torch.bfloat16).eval()
vision.requires_grad_(False)
connector = nn.Linear(vcfg.hidden_size * SCALE * SCALE, lcfg.hidden_size).to(device)
llm = LlamaForCausalLM(lcfg).to(device=device, dtype=torch.bfloat16)
llm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    task_type="CAUSAL_LM",
)
llm = get_peft_model(llm, lora)
llm.print_trainable_parameters()


def phase(name):
    if device == "cuda":
        print(f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def pixel_unshuffle(x, scale):
    # Idefics3Connector.pixel_shuffle: (n, seq, d) -> (n, seq / scale^2, d * scale^2)
    n, seq, d = x.shape
    h = w = int(seq**0.5)
    x = x.view(n, h, w, d).view(n, h, w // scale, d * scale).permute(0, 2, 1, 3)
    x = x.reshape(n, w // scale, h // scale, d * scale * scale).permute(0, 2, 1, 3)
    return x.reshape(n, seq // (scale * scale), d * scale * scale)


def image_tokens(pixels):
    with torch.no_grad():
        feats = vision(pixel_values=pixels).last_hidden_state
    return connector(pixel_unshuffle(feats, SCALE).to(connector.weight.dtype))


def batch(n, answer_len):
    pixels = torch.randn(n, 3, vcfg.image_size, vcfg.image_size, device=device, dtype=torch.bfloat16)
    prompt = torch.randint(3, lcfg.vocab_size, (n, PROMPT), device=device)
    answer = torch.randint(3, lcfg.vocab_size, (n, answer_len), device=device)
    return pixels, prompt, answer


def forward_loss(pixels, prompt, answer):
    embed = llm.get_input_embeddings()
    inputs_embeds = torch.cat([embed(prompt), image_tokens(pixels).to(torch.bfloat16), embed(answer)], dim=1)
    n = prompt.shape[0]
    labels = torch.cat(
        [torch.full((n, PROMPT + N_IMG), IGNORE, device=device, dtype=torch.long), answer], dim=1
    )
    mask = torch.ones(labels.shape, device=device, dtype=torch.long)
    return llm(inputs_embeds=inputs_embeds, attention_mask=mask, labels=labels).loss


params = [p for p in llm.parameters() if p.requires_grad] + list(connector.parameters())
optimizer = torch.optim.AdamW(params, lr=2e-4, weight_decay=0.0)
phase("model")
llm.train()
for step in range(2):
    with torch.autocast(**amp):
        loss = forward_loss(*batch(B, ANSWER))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    del loss
    phase(f"step {step}")

llm.eval()
with torch.no_grad(), torch.autocast(**amp):
    val = forward_loss(*batch(EVAL_B, ANSWER))
    print(f"val loss {val.item():.4f}")
    del val
phase("val")


def generate():
    pixels, prompt, _ = batch(GEN, 0)
    with torch.no_grad(), torch.autocast(**amp):
        embed = llm.get_input_embeddings()
        inputs_embeds = torch.cat([embed(prompt), image_tokens(pixels).to(torch.bfloat16)], dim=1)
        mask = torch.ones(inputs_embeds.shape[:2], device=device, dtype=torch.long)
        out = llm.generate(
            inputs_embeds=inputs_embeds,
            attention_mask=mask,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            pad_token_id=0,
        )
    print(f"generated {tuple(out.shape)}")


generate()
phase("generate")
llm = llm.merge_and_unload()
generate()
phase("merged generate")

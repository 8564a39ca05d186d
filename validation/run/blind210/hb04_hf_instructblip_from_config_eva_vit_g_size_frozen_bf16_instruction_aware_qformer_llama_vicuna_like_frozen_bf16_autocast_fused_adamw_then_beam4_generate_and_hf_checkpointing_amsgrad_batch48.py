"""HF InstructBLIP from config (InstructBlipForConditionalGeneration), on random pixels and tokens.

Vision: an EVA ViT-g-sized tower (39 layers of 1408, 16 heads, 224 px / 14 -> 257 tokens) in bf16,
frozen. Q-Former: 12 layers of 768 with cross attention every second layer, 32 learned queries and
the instruction (24 tokens) read by the Q-Former too (instruction-aware queries), fp32 and trained
with the queries and the language projection. LLM: a Vicuna-like LlamaForCausalLM (16 layers of
2048, 32 heads, SwiGLU 5632, vocabulary 32,001 with the image token 32,000) in bf16, frozen. Each LM
row: 32 image tokens (masked_scatter of the projected queries), 40 instruction tokens and 32 answer
tokens, labels on the answer.
Phase 1: bf16 autocast, fused AdamW, 3 steps at batch 16. Phase 2: beam search of 4 beams, exactly 24
new tokens (min_new_tokens), batch 8 under inference_mode. Phase 3: HF gradient checkpointing
(non-reentrant) over the whole model, AdamW with amsgrad, 2 steps at batch 48. 3 phases after the
model's."""

import os

import torch
from transformers import (
    InstructBlipConfig,
    InstructBlipForConditionalGeneration,
    InstructBlipQFormerConfig,
    InstructBlipVisionConfig,
    LlamaConfig,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21004)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
IMAGE_TOKEN = 32000
if SMALL:
    vision = InstructBlipVisionConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, image_size=56
    )
    qformer = InstructBlipQFormerConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        encoder_hidden_size=64,
    )
    text = LlamaConfig(
        vocab_size=IMAGE_TOKEN + 1,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
    )
    B1, B2, B3, INSTR, QINSTR, ANSWER, NEW, QUERIES = 2, 2, 4, 8, 8, 8, 4, 8
else:
    vision = InstructBlipVisionConfig(
        hidden_size=1408, intermediate_size=6144, num_hidden_layers=39, num_attention_heads=16, image_size=224
    )
    qformer = InstructBlipQFormerConfig(
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        cross_attention_frequency=2,
        encoder_hidden_size=1408,
    )
    text = LlamaConfig(
        vocab_size=IMAGE_TOKEN + 1,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=32,
        max_position_embeddings=2048,
    )
    B1, B2, B3, INSTR, QINSTR, ANSWER, NEW, QUERIES = 16, 8, 48, 40, 24, 32, 24, 32
text.pad_token_id = 0
text.bos_token_id = 1
text.eos_token_id = 2
config = InstructBlipConfig(
    vision_config=vision.to_dict(),
    qformer_config=qformer.to_dict(),
    text_config=text.to_dict(),
    num_query_tokens=QUERIES,
    image_token_index=IMAGE_TOKEN,
)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = InstructBlipForConditionalGeneration(config).to(device)
model.vision_model.to(torch.bfloat16).requires_grad_(False)
model.language_model.to(torch.bfloat16).requires_grad_(False)
trainable = [p for p in model.parameters() if p.requires_grad]
print(f"trainable {sum(p.numel() for p in trainable)} of {sum(p.numel() for p in model.parameters())}")
report("model")


def make_batch(b, answer=True):
    pixels = torch.randn(b, 3, vision.image_size, vision.image_size, device=device, dtype=torch.bfloat16)
    qids = torch.randint(1000, 30000, (b, QINSTR), device=device)
    image = torch.full((b, QUERIES), IMAGE_TOKEN, device=device)
    instr = torch.randint(3, IMAGE_TOKEN, (b, INSTR), device=device)
    if not answer:
        return pixels, qids, torch.cat([image, instr], dim=1), None
    ans = torch.randint(3, IMAGE_TOKEN, (b, ANSWER), device=device)
    ids = torch.cat([image, instr, ans], dim=1)
    labels = torch.cat([torch.full((b, QUERIES + INSTR), -100, device=device), ans], dim=1)
    return pixels, qids, ids, labels


def train(opt, steps, b):
    model.train()
    for step in range(steps):
        pixels, qids, ids, labels = make_batch(b)
        with torch.autocast(device, dtype=torch.bfloat16):
            out = model(
                pixel_values=pixels,
                qformer_input_ids=qids,
                qformer_attention_mask=torch.ones_like(qids),
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                labels=labels,
            )
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {out.loss.item():.4f}")
        del out


opt = torch.optim.AdamW(trainable, lr=1e-5, weight_decay=0.05, fused=device == "cuda")
train(opt, 3, B1)
report("instruction tuning bf16 autocast fused adamw")

model.eval()
pixels, qids, ids, _ = make_batch(B2, answer=False)
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    gen = model.generate(
        pixel_values=pixels,
        qformer_input_ids=qids,
        qformer_attention_mask=torch.ones_like(qids),
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        num_beams=4,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
print(f"generated {tuple(gen.shape)}")
del gen, pixels, qids, ids
report("beam search generate")

del opt
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.AdamW(trainable, lr=1e-5, weight_decay=0.05, amsgrad=True)
train(opt, 2, B3)
report("hf checkpointing amsgrad batch 48")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")

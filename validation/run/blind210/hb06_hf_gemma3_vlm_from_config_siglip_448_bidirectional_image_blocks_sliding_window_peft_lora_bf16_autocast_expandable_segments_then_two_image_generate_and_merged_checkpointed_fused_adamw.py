"""HF Gemma 3 vision-language model from config (Gemma3ForConditionalGeneration, bf16 weights, sdpa)
under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set at the top, on random pixels and tokens.

Vision: a SigLIP tower at so400m's size (27 layers of 1152, 16 heads, MLP 4304) at 448 px (32 x 32
patches of 14), average-pooled 2x2 into 256 soft tokens, RMS-normed and projected into the text width.
Text: a Gemma 3 decoder of 18 layers of 1152 (4 heads of 256, one key/value head, GeGLU 6912,
vocabulary 262,208, tied embeddings), five sliding-window layers (512) to one global, so rows longer
than the window. Each row holds two images (boi, 256 image tokens, eoi) between text; token_type_ids
mark the image tokens, so each image's tokens attend to each other bidirectionally (Gemma 3's block
masks composed with causal and sliding masks), labels on the text after the second image.
Phase 1: peft LoRA (r 16, alpha 32, every projection of the language model; the multi-modal projector
in modules_to_save), vision tower frozen, bf16 autocast, foreach AdamW, 2 steps at batch 4.
Phase 2: greedy generate() of 32 tokens from two-image prompts at batch 4 under inference_mode (the
hybrid sliding/global KV cache).
Phase 3: merge_and_unload, the optimizer dropped and empty_cache(); then the whole language model and
projector trained (vision frozen) with HF gradient checkpointing (non-reentrant) and fused AdamW on the
bf16 weights, 2 steps at batch 8. 3 phases after the model's."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from peft import LoraConfig, get_peft_model
from transformers import Gemma3Config, Gemma3ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21006)
device = "cuda" if torch.cuda.is_available() else "cpu"
IMAGE, BOI, EOI, BOS = 262144, 255999, 256000, 2
if SMALL:
    vision = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=56,
        patch_size=14,
    )
    text = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=16,
    )
    MM_TOKENS, TXT, ANSWER, B1, B2, B3, NEW = 4, 8, 16, 2, 2, 2, 4
else:
    vision = dict(
        hidden_size=1152,
        intermediate_size=4304,
        num_hidden_layers=27,
        num_attention_heads=16,
        image_size=448,
        patch_size=14,
    )
    text = dict(
        hidden_size=1152,
        intermediate_size=6912,
        num_hidden_layers=18,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        query_pre_attn_scalar=256,
        sliding_window=512,
    )
    MM_TOKENS, TXT, ANSWER, B1, B2, B3, NEW = 256, 48, 128, 4, 4, 8, 32
vision["vision_use_head"] = False
text["vocab_size"] = 262208
config = Gemma3Config(
    vision_config=vision,
    text_config=text,
    mm_tokens_per_image=MM_TOKENS,
    boi_token_index=BOI,
    eoi_token_index=EOI,
    image_token_index=IMAGE,
)
config._attn_implementation = "sdpa"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = Gemma3ForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16)
report("model")
SIZE = vision["image_size"]


def make_batch(b, answer=True):
    """Rows: bos, text, [boi, image x MM_TOKENS, eoi], text, [boi, image, eoi], text (answer)."""
    img = torch.cat([torch.tensor([BOI]), torch.full((MM_TOKENS,), IMAGE), torch.tensor([EOI])]).to(device)
    rows, labels = [], []
    tail = ANSWER if answer else TXT
    for _ in range(b):
        t1 = torch.randint(3, 250000, (TXT,), device=device)
        t2 = torch.randint(3, 250000, (TXT,), device=device)
        t3 = torch.randint(3, 250000, (tail,), device=device)
        row = torch.cat([torch.tensor([BOS], device=device), t1, img, t2, img, t3])
        rows.append(row)
        labels.append(torch.cat([torch.full((row.numel() - tail,), -100, device=device), t3]))
    ids = torch.stack(rows)
    pixels = torch.randn(2 * b, 3, SIZE, SIZE, device=device, dtype=torch.bfloat16)
    return ids, (ids == IMAGE).long(), pixels, torch.stack(labels)


def train(m, opt, steps, b):
    m.train()
    for step in range(steps):
        ids, types, pixels, labels = make_batch(b)
        with torch.autocast(device, dtype=torch.bfloat16):
            out = m(input_ids=ids, token_type_ids=types, pixel_values=pixels, labels=labels)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {out.loss.item():.4f}")
        del out


# phase 1: peft LoRA on the language model, projector saved, bf16 autocast, foreach AdamW
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    modules_to_save=["multi_modal_projector"],
)
peft_model = get_peft_model(model, lora)
peft_model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-4, foreach=True)
train(peft_model, opt, 2, B1)
report("peft lora bf16 autocast foreach adamw")

# phase 2: two-image prompts, greedy generate with the hybrid cache
peft_model.eval()
ids, types, pixels, _ = make_batch(B2, answer=False)
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    gen = peft_model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        token_type_ids=types,
        pixel_values=pixels,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
print(f"generated {tuple(gen.shape)}")
del gen, ids, types, pixels
report("two-image generate")

# phase 3: merged, full language model + projector, HF checkpointing, fused AdamW on bf16 weights
del opt
model = peft_model.merge_and_unload()
del peft_model
if device == "cuda":
    torch.cuda.empty_cache()
model.requires_grad_(True)
model.model.vision_tower.requires_grad_(False)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.AdamW(
    [p for p in model.parameters() if p.requires_grad], lr=1e-5, weight_decay=0.0, fused=device == "cuda"
)
train(model, opt, 2, B3)
report("merged full language model, checkpointing, fused adamw")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")

"""Fine-tuning and running a LightOnOCR-sized page transcriber: LightOnOcrForConditionalGeneration from the
default LightOnOcrConfig (Pixtral vision encoder 1,024 wide, 24 layers, patch 14 with 2-D RoPE over the
page's own patch grid; 2 x 2 patch merger; Qwen3 decoder 1,024 wide, 28 layers, 16 heads, 8 KV heads,
vocabulary 151,936; random init), cast to bf16, with a peft LoRA (r 16, alpha 32) on the decoder's attention
and MLP projections; the vision tower and the rest frozen. The page's image tokens are (H / 28) x (W / 28)
`<image>` placeholders written by hand into the prompt.

Phases: 0 bf16 model + LoRA + AdamW on the adapters; 1 three teacher-forced steps at batch 2 on 1,036 x 812
pages (1,073 image tokens) with 384 transcription tokens, labels -100 on the prompt; 2 inference_mode
greedy `generate()` of 128 tokens (min == max) with the adapter unmerged, batch 2; 3 `merge_and_unload()`,
then one left-padded batch of two pages of different sizes (1,036 x 812 and 812 x 616, pixel_values padded
to the larger, `image_sizes` given), 96 new tokens. Seeded; no sizes depend on values."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import LightOnOcrConfig, LightOnOcrForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3555)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = LightOnOcrConfig(
        vision_config={
            "model_type": "pixtral",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "head_dim": 16,
            "image_size": 1540,
            "patch_size": 14,
        },
        text_config={
            "model_type": "qwen3",
            "vocab_size": 1000,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
        },
        image_token_id=999,
    )
    PAGE, SMALL_PAGE, TARGET, NEW2, NEW3, PAD, EOS = (168, 140), (112, 84), 12, 6, 5, 998, 997
else:
    config = LightOnOcrConfig()
    PAGE, SMALL_PAGE, TARGET, NEW2, NEW3, PAD, EOS = (1036, 812), (812, 616), 384, 128, 96, 151643, 151645
BATCH = 2
IMAGE = config.image_token_id
dtype = torch.bfloat16 if cuda else torch.float32
HEAD = [151644 % config.text_config.vocab_size, 11, 12, 13]
TAIL = [21, 22, 23, 24, 25, 26]


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


base = LightOnOcrForConditionalGeneration(config).to(device, dtype)
base.generation_config.pad_token_id = PAD
base.generation_config.eos_token_id = EOS
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
)
model = get_peft_model(base, lora)
trainable = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trainable, lr=2e-4)
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,}, "
    f"trainable {sum(p.numel() for p in trainable):,}"
)
report("phase0 lighton-ocr bf16 + lora + adamw")


def prompt_ids(size):
    tokens = (size[0] // 28) * (size[1] // 28)
    return HEAD + [IMAGE] * tokens + TAIL


def pages(n, size):
    return torch.rand(n, 3, *size, device=device, dtype=dtype), torch.tensor([size] * n, device=device)


model.train()
prompt = prompt_ids(PAGE)
for step in range(3):
    pixels, sizes = pages(BATCH, PAGE)
    target = torch.randint(100, 900, (BATCH, TARGET), device=device)
    input_ids = torch.cat([torch.tensor(prompt, device=device).repeat(BATCH, 1), target], 1)
    labels = input_ids.clone()
    labels[:, : len(prompt)] = -100
    loss = model(input_ids=input_ids, pixel_values=pixels, image_sizes=sizes, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} sequence {input_ids.shape[1]} loss {loss.item():.4f}")
del loss
report(f"phase1 three lora steps at batch {BATCH}, {PAGE[0]}x{PAGE[1]} pages, {TARGET} target tokens")

model.eval()
pixels, sizes = pages(BATCH, PAGE)
input_ids = torch.tensor(prompt, device=device).repeat(BATCH, 1)
with torch.inference_mode():
    out = model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        pixel_values=pixels,
        image_sizes=sizes,
        max_new_tokens=NEW2,
        min_new_tokens=NEW2,
        do_sample=False,
    )
print(f"with adapter: {tuple(out.shape)}")
del out, pixels
report(f"phase2 greedy generate with unmerged adapter, batch {BATCH} x {NEW2} tokens")

del opt, trainable
merged = model.merge_and_unload()
long_prompt, short_prompt = prompt_ids(PAGE), prompt_ids(SMALL_PAGE)
pad = len(long_prompt) - len(short_prompt)
input_ids = torch.tensor([long_prompt, [PAD] * pad + short_prompt], device=device)
attention_mask = torch.ones_like(input_ids)
attention_mask[1, :pad] = 0
pixels = torch.zeros(2, 3, *PAGE, device=device, dtype=dtype)
pixels[0] = torch.rand(3, *PAGE, device=device, dtype=dtype)
pixels[1, :, : SMALL_PAGE[0], : SMALL_PAGE[1]] = torch.rand(3, *SMALL_PAGE, device=device, dtype=dtype)
sizes = torch.tensor([PAGE, SMALL_PAGE], device=device)
with torch.inference_mode():
    out = merged.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        pixel_values=pixels,
        image_sizes=sizes,
        max_new_tokens=NEW3,
        min_new_tokens=NEW3,
        do_sample=False,
    )
print(f"merged, mixed sizes: {tuple(out.shape)}")
del out
report(f"phase3 merged, left-padded batch of two page sizes x {NEW3} tokens")

"""Page OCR with a GOT-OCR2-sized GotOcr2ForConditionalGeneration built from the default GotOcr2Config
(SAM ViT-B vision encoder on 1,024 x 1,024 pages with windowed + global attention and a 256-channel neck,
two stride-2 convolutions projecting 64 x 64 patches to 256 image tokens, Qwen2 decoder 1,024 wide, 24
layers, vocabulary 151,860; random init) cast to bf16 with `.to(device, torch.bfloat16)` and run under
`inference_mode`. The prompt is the chat template's token layout written by hand: a few system/user tokens,
256 `<imgpad>` tokens per image, then "OCR:" tokens; `generate()` with `max_new_tokens == min_new_tokens`.

Phase 1 greedy plain-text OCR of 2 single pages (256 new tokens); phase 2 the multi-crop mode: the page
tiled 2 x 2 plus a thumbnail, 5 x 256 image tokens in one sequence, 1 page, 128 new tokens; phase 3
beam search (3 beams, generate expands pixel_values per beam) on 1 page, 64 new tokens. Seeded; no sizes
depend on values."""

import os

import torch
from transformers import GotOcr2Config, GotOcr2ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3551)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = GotOcr2Config(
        vision_config={
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "mlp_dim": 128,
            "image_size": 256,
            "window_size": 4,
            "global_attn_indexes": [1],
            "output_channels": 32,
        },
        text_config={
            "model_type": "qwen2",
            "vocab_size": 1000,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
        },
        image_token_index=999,
    )
    SIZE, TOKENS, PAD, EOS = 256, 16, 998, 997
    B1, NEW1, B2, CROPS, NEW2, B3, NEW3 = 2, 8, 1, 3, 6, 1, 5
else:
    config = GotOcr2Config()
    SIZE, TOKENS, PAD, EOS = 1024, 256, 151643, 151645
    B1, NEW1, B2, CROPS, NEW2, B3, NEW3 = 2, 256, 1, 5, 128, 1, 64
IMAGE = config.image_token_index
dtype = torch.bfloat16 if cuda else torch.float32


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


model = GotOcr2ForConditionalGeneration(config).to(device, dtype).eval()
model.generation_config.pad_token_id = PAD
model.generation_config.eos_token_id = EOS
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 got-ocr2 bf16")

HEAD = [11, 12, 13, 14, 15, 16, 17, 18]
TAIL = [21, 22, 23, 24, 25, 26]


def prompts(batch, images_per_page):
    ids = HEAD + [IMAGE] * (TOKENS * images_per_page) + TAIL
    return torch.tensor(ids, device=device).repeat(batch, 1)


def ocr(batch, images_per_page, new, **kwargs):
    pixels = torch.rand(batch * images_per_page, 3, SIZE, SIZE, device=device, dtype=dtype)
    input_ids = prompts(batch, images_per_page)
    with torch.inference_mode():
        return model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            pixel_values=pixels,
            max_new_tokens=new,
            min_new_tokens=new,
            **kwargs,
        )


out = ocr(B1, 1, NEW1, do_sample=False)
print(f"single page: {tuple(out.shape)}")
del out
report(f"phase1 greedy OCR, {B1} pages x {NEW1} new tokens")

out = ocr(B2, CROPS, NEW2, do_sample=False)
print(f"multi-crop: {tuple(out.shape)}")
del out
report(f"phase2 multi-crop OCR, {B2} pages x {CROPS} tiles x {NEW2} new tokens")

out = ocr(B3, 1, NEW3, do_sample=False, num_beams=3)
print(f"beam search: {tuple(out.shape)}")
del out
report(f"phase3 beam search 3, {B3} pages x {NEW3} new tokens")

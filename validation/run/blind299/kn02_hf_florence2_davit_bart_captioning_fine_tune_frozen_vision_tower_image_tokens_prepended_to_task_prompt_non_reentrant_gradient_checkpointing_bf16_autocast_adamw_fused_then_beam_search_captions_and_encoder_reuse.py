"""Caption fine-tune of a vision-language encoder-decoder: a Florence2ForConditionalGeneration from
Florence2Config (DaViT vision tower of depths 1/1/9/1, dims 128..1024, window 12, projected to 768 with
2D learned position and cosine temporal embeddings; BART text side of 6 + 6 layers of 768, 12 heads,
vocabulary 51,290 with the <image> token). Images of 512 x 512 give 257 image tokens; the input ids are
257 <image> placeholders followed by a short task prompt, as Florence2's processor lays them out.

The vision tower is frozen (requires_grad_(False), eval()), the rest trains in fp32 under bf16 autocast
with non-reentrant gradient checkpointing and AdamW(fused=True) over the trainable parameters only.
Phases: (1) model build + first step at batch 8; (2) three more steps at batch 8 with captions of up to
40 tokens; (3) beam search (3 beams, 24 new tokens) for 12 images under inference_mode; (4) the encoder
run once (get_encoder on merged image + prompt embeddings) and its output reused for two greedy
generations with different lengths. 4 phases."""

import os

import torch
from transformers import BartConfig, Florence2Config, Florence2ForConditionalGeneration, Florence2VisionConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(29902)
if SMALL:
    vcfg = Florence2VisionConfig(
        depths=(1, 1, 2, 1),
        embed_dim=(32, 64, 128, 256),
        num_heads=(2, 4, 8, 16),
        num_groups=(2, 4, 8, 16),
        projection_dim=64,
        window_size=6,
    )
    tcfg = BartConfig(
        vocab_size=600,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_position_embeddings=512,
    )
    IMG, B, CAP, PROMPT, GEN_B, NEW = 192, 2, 8, 4, 2, 4
else:
    vcfg = Florence2VisionConfig(projection_dim=768)
    tcfg = BartConfig(
        vocab_size=51290,
        d_model=768,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=12,
        decoder_attention_heads=12,
        encoder_ffn_dim=3072,
        decoder_ffn_dim=3072,
        max_position_embeddings=1024,
    )
    IMG, B, CAP, PROMPT, GEN_B, NEW = 512, 8, 40, 7, 12, 24
cfg = Florence2Config(vision_config=vcfg, text_config=tcfg, image_token_id=tcfg.vocab_size - 1)
N_IMG_TOKENS = (IMG // 32) ** 2 + 1  # DaViT's stride 32 grid plus the temporal token
device = "cuda" if torch.cuda.is_available() else "cpu"
PAD, BOS, EOS = tcfg.pad_token_id, tcfg.bos_token_id, tcfg.eos_token_id


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def encoder_inputs(n):
    """<image> x N_IMG_TOKENS, then bos + task prompt + eos (the same prompt for every row)."""
    prompt = torch.randint(4, cfg.image_token_id, (PROMPT,))
    row = torch.cat(
        [torch.full((N_IMG_TOKENS,), cfg.image_token_id), torch.tensor([BOS]), prompt, torch.tensor([EOS])]
    )
    ids = row.expand(n, -1).clone()
    pixels = torch.randn(n, 3, IMG, IMG)
    return ids.to(device), pixels.to(device)


def captions(n):
    labels = torch.full((n, CAP), -100, dtype=torch.long)
    for i in range(n):
        k = int(torch.randint(CAP // 3, CAP + 1, ()).item())
        labels[i, : k - 1] = torch.randint(4, cfg.image_token_id, (k - 1,))
        labels[i, k - 1] = EOS
    return labels.to(device)


model = Florence2ForConditionalGeneration(cfg).to(device)
vision = model.model.vision_tower
vision.requires_grad_(False)
model.train()
vision.eval()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
trainable = [p for p in model.parameters() if p.requires_grad]
print(f"trainable {sum(p.numel() for p in trainable)} of {sum(p.numel() for p in model.parameters())}")
opt = torch.optim.AdamW(trainable, lr=1e-5, weight_decay=0.01, fused=device == "cuda")

for step in range(4):
    ids, pixels = encoder_inputs(B)
    labels = captions(B)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=ids, pixel_values=pixels, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out
    if step == 0:
        report("build and first step")
report("caption fine-tune steps")

model.eval()
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    ids, pixels = encoder_inputs(GEN_B)
    gen = model.generate(
        input_ids=ids,
        pixel_values=pixels,
        num_beams=3,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
    print(f"beam captions {tuple(gen.shape)}")
    del gen
report("beam search captions")

with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    ids, pixels = encoder_inputs(GEN_B)
    embeds = model.get_input_embeddings()(ids)
    image_features = model.get_image_features(pixels).pooler_output.to(embeds.dtype)
    mask = (ids == cfg.image_token_id).unsqueeze(-1).expand_as(embeds)
    embeds = embeds.masked_scatter(mask, image_features)
    encoder_outputs = model.get_encoder()(inputs_embeds=embeds)
    for new in (NEW // 2, NEW):
        gen = model.generate(
            encoder_outputs=encoder_outputs,
            attention_mask=torch.ones(ids.shape, dtype=torch.long, device=device),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
        )
        print(f"greedy from cached encoder {tuple(gen.shape)}")
        del gen
    del encoder_outputs, embeds, image_features
report("encoder reuse greedy")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")

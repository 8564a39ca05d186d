"""BLIP-2 stage-2 (vision-to-language generative) training with a frozen Flan-T5, as in the BLIP-2 paper:
Blip2ForConditionalGeneration from a config (random weights, sdpa where supported): an EVA-style ViT of 20
layers at 1408 (224 px, patch 14, 257 tokens), a Q-former of 12 BERT layers at 768 with cross-attention
every 2nd layer over the image features and 32 learned query tokens, a linear language projection into a
Flan-T5-large-sized encoder-decoder (24 + 24 layers at 1024, 16 heads, gated-GELU FFN 2816, vocabulary
32,128). The image encoder and the T5 are frozen in bf16; the Q-former, the query tokens and the language
projection stay in fp32 (as BLIP-2's `_keep_in_fp32_modules`) and are trained under bf16 autocast with
fused AdamW (weight decay 0.05) and a cosine schedule. The T5 encoder's input is 32 image placeholder tokens
(image_token_index 32100, replaced by the projected queries) followed by the prompt; the caption is the
decoder's labels.
Phases: 0 the model; 1 three steps at batch 48 (prompts of 8-16 tokens and </s>, captions of 12-24
padded with -100); 2 eval loss under no_grad at batch 64; 3 VQA generate() with 5 beams, 12 new tokens,
batch 12; 4 greedy captioning with only the image placeholders (and </s>) as the encoder input, 30 new
tokens, batch 32."""

import os

import torch
from transformers import Blip2Config, Blip2ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34404)
device = "cuda" if torch.cuda.is_available() else "cpu"
IMAGE_TOKEN, QUERIES, VOCAB = 32100, 32, 32128
if SMALL:
    V_LAYERS, V_W, V_FF, V_HEADS, IMG = 2, 64, 128, 4, 56
    Q_LAYERS, Q_W, Q_FF, Q_HEADS = 2, 64, 128, 4
    T_LAYERS, T_W, T_FF, T_HEADS, T_KV = 2, 64, 128, 4, 16
    BS, EVAL_BS, BEAM_BS, CAP_BS, PROMPT, CAPTION = 4, 4, 2, 3, 6, 8
else:
    V_LAYERS, V_W, V_FF, V_HEADS, IMG = 20, 1408, 6144, 16, 224
    Q_LAYERS, Q_W, Q_FF, Q_HEADS = 12, 768, 3072, 12
    T_LAYERS, T_W, T_FF, T_HEADS, T_KV = 24, 1024, 2816, 16, 64
    BS, EVAL_BS, BEAM_BS, CAP_BS, PROMPT, CAPTION = 48, 64, 12, 32, 16, 24
STEPS = 3


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


config = Blip2Config(
    vision_config=dict(
        hidden_size=V_W,
        intermediate_size=V_FF,
        num_hidden_layers=V_LAYERS,
        num_attention_heads=V_HEADS,
        image_size=IMG,
        patch_size=14,
        qkv_bias=True,
    ),
    qformer_config=dict(
        hidden_size=Q_W,
        intermediate_size=Q_FF,
        num_hidden_layers=Q_LAYERS,
        num_attention_heads=Q_HEADS,
        cross_attention_frequency=2,
        encoder_hidden_size=V_W,
    ),
    text_config=dict(
        model_type="t5",
        vocab_size=VOCAB,
        d_model=T_W,
        d_kv=T_KV,
        d_ff=T_FF,
        num_layers=T_LAYERS,
        num_decoder_layers=T_LAYERS,
        num_heads=T_HEADS,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    ),
    num_query_tokens=QUERIES,
    image_token_index=IMAGE_TOKEN,
)
model = Blip2ForConditionalGeneration(config).to(device)
model.vision_model.to(torch.bfloat16).requires_grad_(False)
model.language_model.to(torch.bfloat16).requires_grad_(False)
trainable = [p for p in model.parameters() if p.requires_grad]
decay = [p for p in trainable if p.ndim >= 2]
no_decay = [p for p in trainable if p.ndim < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
    lr=1e-4,
    betas=(0.9, 0.98),
    fused=device == "cuda",
)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)
print(f"trainable {sum(p.numel() for p in trainable)}")
report("model")


def batch(n, prompt_len, caption_len):
    prompt_lens = torch.randint(prompt_len // 2, prompt_len + 1, (n,))
    ids = torch.zeros(n, QUERIES + prompt_len + 1, dtype=torch.long)
    mask = torch.zeros_like(ids)
    ids[:, :QUERIES] = IMAGE_TOKEN
    mask[:, :QUERIES] = 1
    for i, k in enumerate(prompt_lens.tolist()):
        ids[i, QUERIES : QUERIES + k] = torch.randint(3, 32000, (k,))
        ids[i, QUERIES + k] = 1
        mask[i, QUERIES : QUERIES + k + 1] = 1
    pixels = torch.randn(n, 3, IMG, IMG)
    inputs = {
        "pixel_values": pixels.to(device, torch.bfloat16),
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
    }
    if caption_len:
        cap_lens = torch.randint(caption_len // 2, caption_len + 1, (n,))
        labels = torch.randint(3, 32000, (n, caption_len))
        labels[torch.arange(caption_len)[None, :] >= cap_lens[:, None]] = -100
        inputs["labels"] = labels.to(device)
    return inputs


model.train()
model.vision_model.eval()
model.language_model.eval()
for step in range(STEPS):
    inputs = batch(BS, PROMPT, CAPTION)
    with torch.autocast(device, dtype=torch.bfloat16):
        out = model(**inputs)
    out.loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, inputs
report("train_qformer_projection_bf16_autocast")

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    inputs = batch(EVAL_BS, PROMPT, CAPTION)
    loss = model(**inputs).loss
    print(f"eval loss {loss.item():.4f}")
    del inputs, loss
report("eval_loss_no_grad")

with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    inputs = batch(BEAM_BS, PROMPT, 0)
    out = model.generate(**inputs, num_beams=5, max_new_tokens=12, min_new_tokens=12, length_penalty=-1.0)
    print("vqa beams", tuple(out.shape))
    del out, inputs
report("generate_vqa_beam5")

with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    inputs = batch(CAP_BS, 0, 0)
    out = model.generate(**inputs, do_sample=False, max_new_tokens=30, min_new_tokens=30)
    print("captions", tuple(out.shape))
    del out, inputs
report("generate_captions_greedy")

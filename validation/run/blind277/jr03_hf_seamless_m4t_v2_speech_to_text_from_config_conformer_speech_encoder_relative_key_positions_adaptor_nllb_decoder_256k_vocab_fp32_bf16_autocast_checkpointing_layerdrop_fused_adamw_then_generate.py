"""Speech translation fine-tuning with SeamlessM4T v2 (transformers 5.17's `SeamlessM4Tv2ForSpeechToText` from
config, the large layout scaled down): the w2v-BERT 2.0 Conformer speech encoder (12 x 1,024, 16 heads, FFN
4,096, swish, the depthwise convolution of 31, relative-key positions: a (frames, frames, 64) distance
embedding per layer; speech layerdrop 0.1) over 160-dim stacked fbank frames, the stride-8 convolutional
adaptor, and the NLLB text decoder (12 x 1,024, FFN 4,096, vocabulary 256,102, tied). fp32 weights under bf16
autocast, non-reentrant gradient checkpointing, every parameter trained by fused AdamW: 5 steps of 4 clips of
20 s (1,000 frames; the last three right-padded to 900, 760 and 640 frames by the feature extractor's
attention mask, built on the host), 96 target tokens each (the last 16 of two rows padding, label -100); a
no_grad evaluation of 2 batches (eval mode); then `generate()` (greedy, the decoder's self- and
cross-attention cache, `decoder_input_ids` = [eos, target-language code] as `tgt_lang` would set them,
min_new_tokens == max_new_tokens == 64) for 4 clips under inference_mode and autocast. Seeded (the layerdrop
draws are the host generator's), no value-dependent sizes. 4 phases."""

import torch
from transformers import SeamlessM4Tv2Config, SeamlessM4Tv2ForSpeechToText

torch.manual_seed(2773)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = SeamlessM4Tv2Config(
    vocab_size=256102,
    hidden_size=1024,
    speech_encoder_layers=12,
    speech_encoder_attention_heads=16,
    speech_encoder_intermediate_size=4096,
    speech_encoder_layerdrop=0.1,
    encoder_layers=1,
    decoder_layers=12,
    decoder_ffn_dim=4096,
    decoder_attention_heads=16,
    decoder_layerdrop=0.05,
    encoder_layerdrop=0.0,
    max_position_embeddings=1024,
)
model = SeamlessM4Tv2ForSpeechToText(cfg).cuda()
print("params", sum(p.numel() for p in model.parameters()))
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01, fused=True)
report("seamless_m4t_v2_s2t_built_fp32")

B, FRAMES, TGT = 4, 1000, 96
LENGTHS = [1000, 900, 760, 640]
TGT_PAD = [0, 16, 0, 16]
TGT_LANG = 256047  # an NLLB language-code id


def batch():
    feats = torch.randn(B, FRAMES, 160)
    mask = torch.zeros(B, FRAMES, dtype=torch.long)
    for r, n in enumerate(LENGTHS):
        mask[r, :n] = 1
        feats[r, n:] = 0.0
    labels = torch.randint(4, 256000, (B, TGT))
    labels[:, 0] = TGT_LANG
    for r, p in enumerate(TGT_PAD):
        if p:
            labels[r, TGT - p :] = -100
    return feats.cuda(), mask.cuda(), labels.cuda()


model.train()
for step in range(5):
    feats, mask, labels = batch()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_features=feats, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
del loss
report("s2t_fine_tune_bf16_autocast")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(2):
        feats, mask, labels = batch()
        print("eval", round(model(input_features=feats, attention_mask=mask, labels=labels).loss.item(), 3))
report("no_grad_eval")

del opt
feats, mask, _ = batch()
start = torch.tensor([[cfg.eos_token_id, TGT_LANG]] * B, device="cuda")
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    gen = model.generate(
        input_features=feats,
        attention_mask=mask,
        decoder_input_ids=start,
        do_sample=False,
        num_beams=1,
        max_new_tokens=64,
        min_new_tokens=64,
    )
print("generated", tuple(gen.shape))
report("generate_inference_mode")

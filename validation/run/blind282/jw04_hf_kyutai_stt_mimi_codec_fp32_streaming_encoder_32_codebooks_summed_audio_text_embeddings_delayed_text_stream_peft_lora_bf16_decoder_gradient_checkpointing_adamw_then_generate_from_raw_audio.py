"""A Kyutai speech-to-text model (transformers 5.17's `KyutaiSpeechToTextForConditionalGeneration`) built
from config: the Mimi neural codec (SEANet convolutional encoder, 8-layer transformer, downsampling to 12.5
frames a second, 32 residual-vector-quantizer codebooks), kept in fp32 as the model's
`_keep_in_fp32_modules_strict` asks, and a decoder-only transformer (12 x 2,048, 16 heads, sliding window
375, a 5,632 MLP, text vocabulary 8,001) whose input at each frame is the sum of the text token's and the 32
audio codes' embeddings. Fine-tuning as a streaming ASR model is trained: raw 24 kHz audio (batch 4 x 20 s)
is encoded by the frozen codec under no_grad into 250 frames of codes, the delayed text stream rides beside
them, and the loss is on the text stream; peft 0.21 LoRA (r 16, alpha 32) on the decoder's attention and MLP
linears, the decoder in bf16, non-reentrant gradient checkpointing, 4 AdamW steps; then `generate()` from raw
audio (batch 2 x 6 s; the codec runs in streaming windows inside `prepare_inputs_for_generation`, its own
key/value and conv-padding caches; min_new_tokens == max_new_tokens == 72) under inference_mode. No
value-dependent sizes. 3 phases."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import KyutaiSpeechToTextConfig, KyutaiSpeechToTextForConditionalGeneration

torch.manual_seed(2824)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = KyutaiSpeechToTextConfig(
    vocab_size=8001,
    hidden_size=2048,
    num_hidden_layers=12,
    num_attention_heads=16,
    ffn_dim=11264,
    num_codebooks=32,
    sliding_window=375,
    max_position_embeddings=750,
    bos_token_id=1,
    pad_token_id=3,
)
model = KyutaiSpeechToTextForConditionalGeneration(cfg)
model.model.to(torch.bfloat16)
model.lm_head.to(torch.bfloat16)
model.cuda()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=r"model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj\.linear|mlp\.fc1|mlp\.fc2)",
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
codec = model.base_model.model.codec_model
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
report("kyutai_stt_lora_built")

model.train()
for step in range(4):
    audio = torch.randn(4, 1, 24000 * 20, device="cuda") * 0.1
    with torch.no_grad():
        codes = codec.encode(audio).audio_codes  # (4, 32, 250)
    text = torch.randint(4, cfg.vocab_size - 1, (4, codes.shape[-1], 1), device="cuda")
    ids = torch.cat([text, codes.transpose(1, 2)], dim=2)
    loss = model(input_ids=ids, labels=text[..., 0]).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, tuple(codes.shape), round(loss.item(), 3))
del loss, opt, codes, ids
report("lora_asr_fine_tune")

model.eval()
with torch.inference_mode():
    audio = torch.randn(2, 1, 24000 * 6, device="cuda") * 0.1
    out = model.generate(input_values=audio, max_new_tokens=72, min_new_tokens=72, do_sample=False)
print("generated", tuple(out.shape))
report("generate_from_raw_audio")

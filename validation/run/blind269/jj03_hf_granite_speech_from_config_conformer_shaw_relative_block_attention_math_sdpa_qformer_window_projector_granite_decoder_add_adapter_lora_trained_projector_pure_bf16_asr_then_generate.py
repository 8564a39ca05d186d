"""IBM's Granite Speech from config, fine-tuned for ASR the way its model card's LoRA recipe reads: a
conformer CTC encoder (12 blocks of d 1,024, 8 heads, macaron feed-forwards of 4 x, depthwise conv of
15 taps; attention over blocks of 200 frames with Shaw relative positions, an einsum bias handed to
`scaled_dot_product_attention` under `sdpa_kernel(SDPBackend.MATH)`, the last partial block masked
in place; a mid-network CTC softmax fed back) on 30-second inputs of 1,500 stacked-mel frames of
160; a windowed Q-Former projector (2 layers of d 1,024 with cross-attention, 3 queries per window
of 15 frames: 300 audio embeddings a clip, scattered over `<|audio|>` placeholders with
`masked_scatter`); a Granite decoder (24 layers of d 2,048, 32 query and 8 KV heads, MLP 8,192,
vocabulary 49,160 tied, Granite's embedding / residual / logit multipliers). Pure bf16; a LoRA
(r 64, alpha 32 on q_proj and v_proj: the decoder only) added with transformers' own
`model.add_adapter`, the projector made trainable by hand, the encoder frozen; non-reentrant
gradient checkpointing on the decoder alone (the composite model refuses it); 4 AdamW steps on 4
clips (16 prompt + 300 audio + 128 transcript tokens, only the transcript in the labels, the all-ones
attention mask selecting the shifted logits); a no_grad evaluation; then greedy
`generate(input_features=...)` (the model's override enabling the adapter) for 2 clips, 48 new
tokens (min_new_tokens == max_new_tokens). 4 phases."""

import torch
from peft import LoraConfig
from transformers import GraniteSpeechConfig, GraniteSpeechForConditionalGeneration

torch.manual_seed(2693)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


AUDIO = 49155
cfg = GraniteSpeechConfig(
    encoder_config={
        "input_dim": 160,
        "num_layers": 12,
        "hidden_dim": 1024,
        "feedforward_mult": 4,
        "num_heads": 8,
        "dim_head": 128,
        "output_dim": 42,
        "context_size": 200,
        "max_pos_emb": 512,
        "dropout": 0.1,
        "conv_kernel_size": 15,
    },
    projector_config={
        "model_type": "blip_2_qformer",
        "hidden_size": 1024,
        "num_hidden_layers": 2,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "encoder_hidden_size": 1024,
        "cross_attention_frequency": 1,
        "max_position_embeddings": 2048,
        "vocab_size": 30522,
    },
    text_config={
        "model_type": "granite",
        "vocab_size": 49160,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 4096,
        "embedding_multiplier": 12.0,
        "residual_multiplier": 0.22,
        "logits_scaling": 8.0,
        "attention_multiplier": 0.015625,
        "tie_word_embeddings": True,
    },
    audio_token_index=AUDIO,
    downsample_rate=5,
    window_size=15,
)
model = GraniteSpeechForConditionalGeneration._from_config(cfg, dtype=torch.bfloat16).cuda()
# the composite model does not support it (`supports_gradient_checkpointing` unset): its decoder does
model.model.language_model.gradient_checkpointing_enable({"use_reentrant": False})
model.add_adapter(LoraConfig(r=64, lora_alpha=32, lora_dropout=0.05, target_modules=["q_proj", "v_proj"]))
for p in model.model.projector.parameters():
    p.requires_grad_(True)
for p in model.model.encoder.parameters():
    p.requires_grad_(False)
params = [p for p in model.parameters() if p.requires_grad]
print("trainable", sum(p.numel() for p in params), "of", sum(p.numel() for p in model.parameters()))
opt = torch.optim.AdamW(params, lr=1e-4)
report("granite_speech_adapter_built_bf16")


def clips(n, transcript):
    feats = torch.randn(n, 1500, 160, device="cuda")
    prompt = torch.randint(0, 49000, (n, 16), device="cuda")
    audio = torch.full((n, 300), AUDIO, device="cuda")
    text = torch.randint(0, 49000, (n, transcript), device="cuda")
    ids = torch.cat([prompt, audio, text], dim=1)
    labels = ids.clone()
    labels[:, :316] = -100
    return ids, feats, labels


model.train()
for step in range(4):
    ids, feats, labels = clips(4, 128)
    out = model(input_ids=ids, input_features=feats, attention_mask=torch.ones_like(ids), labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(out.loss.item(), 3))
report("asr_adapter_training")

model.eval()
with torch.no_grad():
    ids, feats, labels = clips(4, 128)
    out = model(input_ids=ids, input_features=feats, attention_mask=torch.ones_like(ids), labels=labels)
    print("eval", round(out.loss.item(), 3))
report("no_grad_eval")

del opt, out
ids, feats, _ = clips(2, 16)
with torch.no_grad():
    gen = model.generate(
        input_ids=ids,
        input_features=feats,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=48,
        min_new_tokens=48,
        pad_token_id=0,
    )
print("generated", tuple(gen.shape), gen[0, -8:].tolist())
report("generate_with_input_features")

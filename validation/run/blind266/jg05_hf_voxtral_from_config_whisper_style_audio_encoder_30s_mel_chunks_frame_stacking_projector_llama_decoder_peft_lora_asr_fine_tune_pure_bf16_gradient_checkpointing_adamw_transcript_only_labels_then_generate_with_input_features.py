"""Speech recognition fine-tuning of a Voxtral-style audio LLM (transformers 5.17's
`VoxtralForConditionalGeneration`) from config: a Whisper-style audio encoder of 12 layers (d 1,280,
20 heads, MLP 5,120, two 1-D convolutions over 128 mel bins, 30 s chunks of 3,000 frames -> 1,500
positions), its output stacked 4 frames at a time (1,500 x 1,280 -> 375 x 5,120) and projected by a
two-layer GELU projector into a Llama decoder of 16 layers (d 2,048, 16 query and 8 KV heads of 128,
MLP 6,144, vocabulary 131,072). Inputs built by hand, no processor: each sample one 30 s chunk of
log-mel features (4, 128, 3,000) and a prompt of 4 tokens, 375 audio placeholder tokens, 2 tokens,
then a 128-token transcript; only the transcript is labelled. Pure bf16; peft 0.21 LoRA (r 32,
alpha 64) on the decoder's attention and MLP projections (encoder and projector frozen),
non-reentrant gradient checkpointing, 6 AdamW steps of 4 samples; then `generate()` (greedy,
min_new_tokens == max_new_tokens == 96) for 2 chunks under `torch.inference_mode()`. No
value-dependent sizes. 3 phases."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import VoxtralConfig, VoxtralForConditionalGeneration

torch.manual_seed(2665)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


AUDIO_TOKEN = 24
cfg = VoxtralConfig(
    audio_config=dict(
        hidden_size=1280,
        intermediate_size=5120,
        num_hidden_layers=12,
        num_attention_heads=20,
        num_mel_bins=128,
        max_source_positions=1500,
    ),
    text_config=dict(
        vocab_size=131072,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=8192,
    ),
    audio_token_id=AUDIO_TOKEN,
)
model = VoxtralForConditionalGeneration(cfg).to(device="cuda", dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
lora = LoraConfig(
    r=32,
    lora_alpha=64,
    lora_dropout=0.05,
    target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    task_type="CAUSAL_LM",
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
report("voxtral_lora_built_bf16")

N_AUDIO, PREFIX = 375, 4


def batch(n, transcript=128):
    ids = torch.randint(1000, cfg.text_config.vocab_size, (n, PREFIX + N_AUDIO + 2 + transcript))
    ids[:, PREFIX : PREFIX + N_AUDIO] = AUDIO_TOKEN
    labels = ids.clone()
    labels[:, : PREFIX + N_AUDIO + 2] = -100
    mel = torch.randn(n, 128, 3000, dtype=torch.bfloat16)
    return ids.cuda(), labels.cuda(), mel.cuda()


model.train()
for step in range(6):
    ids, labels, mel = batch(4)
    loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), input_features=mel, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
report("lora_asr_training")

del opt, loss
model.eval()
ids, _, mel = batch(2, transcript=0)
with torch.inference_mode():
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        input_features=mel,
        max_new_tokens=96,
        min_new_tokens=96,
        do_sample=False,
        pad_token_id=11,
        eos_token_id=2,
    )
print("generated", tuple(out.shape))
report("generate_with_input_features")

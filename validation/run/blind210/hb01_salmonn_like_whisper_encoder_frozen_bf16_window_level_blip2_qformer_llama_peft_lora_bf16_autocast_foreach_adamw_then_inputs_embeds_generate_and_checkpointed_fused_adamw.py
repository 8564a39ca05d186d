"""A SALMONN-like speech-language model by hand, on random log-mels and random tokens.

Audio: the encoder of a WhisperModel from WhisperConfig at whisper-small's size (12 layers of 768, 80
mel bins, 30-s windows of 3,000 frames -> 1,500 frames), frozen, in bf16, run under no_grad.
Connector: a window-level Q-Former (transformers' Blip2QFormerModel, 2 layers of 768 with cross
attention in every layer) that reads windows of 15 encoder frames (0.3 s) with one learned query each:
the (B, 1,500, 768) features reshaped into (B * 100, 15, 768) windows, giving 100 speech tokens a clip,
then a Linear to the LLM's width.
LLM: a LlamaForCausalLM from LlamaConfig (16 layers of 2048, 32 heads, 4 key/value heads, SwiGLU 5632,
vocabulary 32,000) in bf16, frozen, with peft LoRA (r 8, alpha 32, q/v projections).
The prompt is built as inputs_embeds: 12 prompt tokens, the 100 speech tokens, 40 instruction tokens
and 64 answer tokens, labels on the answer only.
Phase 1: 3 steps of bf16 autocast with foreach AdamW over the Q-Former, queries, projector and LoRA at
batch 16. Phase 2: greedy generate() from inputs_embeds (32 new tokens, min_new_tokens fixes the length)
at batch 16 under inference_mode, the KV cache. Phase 3: the LLM with gradient checkpointing
(non-reentrant), a fresh fused AdamW, batch 32. 3 phases."""

import os

import torch
import torch.nn as nn
from peft import LoraConfig, get_peft_model
from transformers import Blip2QFormerConfig, Blip2QFormerModel, LlamaConfig, LlamaForCausalLM, WhisperConfig
from transformers.models.whisper.modeling_whisper import WhisperEncoder

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21001)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    wcfg = WhisperConfig(
        d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128, max_source_positions=150
    )
    lcfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    FRAMES, WINDOW, QF_WIDTH, BATCH, BATCH2, NEW = 300, 15, 64, 2, 2, 4
else:
    wcfg = WhisperConfig(
        d_model=768,
        encoder_layers=12,
        encoder_attention_heads=12,
        encoder_ffn_dim=3072,
        max_source_positions=1500,
    )
    lcfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=4,
        max_position_embeddings=2048,
    )
    FRAMES, WINDOW, QF_WIDTH, BATCH, BATCH2, NEW = 3000, 15, 768, 16, 32, 32
wcfg.num_mel_bins = 80
lcfg.pad_token_id = 0
lcfg.eos_token_id = 2
PROMPT, INSTR, ANSWER = 12, 40, 64
N_WIN = FRAMES // 2 // WINDOW


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class WindowQFormer(nn.Module):
    def __init__(self, enc_width, llm_width):
        super().__init__()
        qcfg = Blip2QFormerConfig(
            hidden_size=QF_WIDTH,
            num_hidden_layers=2,
            num_attention_heads=12 if not SMALL else 4,
            intermediate_size=4 * QF_WIDTH,
            cross_attention_frequency=1,
            encoder_hidden_size=enc_width,
        )
        self.ln = nn.LayerNorm(enc_width)
        self.query = nn.Parameter(torch.randn(1, 1, QF_WIDTH) * 0.02)
        self.qformer = Blip2QFormerModel(qcfg)
        self.proj = nn.Linear(QF_WIDTH, llm_width)

    def forward(self, feats):
        b, t, d = feats.shape
        windows = self.ln(feats).reshape(b * (t // WINDOW), WINDOW, d)
        queries = self.query.expand(windows.shape[0], -1, -1)
        out = self.qformer(query_embeds=queries, encoder_hidden_states=windows).last_hidden_state
        return self.proj(out.reshape(b, t // WINDOW, -1))


encoder = WhisperEncoder(wcfg).to(device=device, dtype=torch.bfloat16).eval().requires_grad_(False)
connector = WindowQFormer(wcfg.d_model, lcfg.hidden_size).to(device)
llm = LlamaForCausalLM(lcfg).to(device=device, dtype=torch.bfloat16)
llm = get_peft_model(
    llm, LoraConfig(r=8, lora_alpha=32, lora_dropout=0.05, target_modules=["q_proj", "v_proj"])
)
llm.print_trainable_parameters()
embed = llm.get_input_embeddings()
report("models")


def batch(n, with_answer=True):
    mels = torch.randn(n, 80, FRAMES, device=device, dtype=torch.bfloat16)
    prompt = torch.randint(3, lcfg.vocab_size, (n, PROMPT), device=device)
    instr = torch.randint(3, lcfg.vocab_size, (n, INSTR), device=device)
    answer = torch.randint(3, lcfg.vocab_size, (n, ANSWER), device=device) if with_answer else None
    return mels, prompt, instr, answer


def build(mels, prompt, instr, answer):
    with torch.no_grad():
        feats = encoder(mels).last_hidden_state
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        speech = connector(feats)
    parts = [embed(prompt), speech.to(torch.bfloat16), embed(instr)]
    if answer is not None:
        parts.append(embed(answer))
    embeds = torch.cat(parts, dim=1)
    if answer is None:
        return embeds, None
    n = prompt.shape[0]
    ignore = torch.full((n, PROMPT + N_WIN + INSTR), -100, device=device, dtype=torch.long)
    return embeds, torch.cat([ignore, answer], dim=1)


def train(opt, steps, n):
    llm.train()
    connector.train()
    for step in range(steps):
        embeds, labels = build(*batch(n))
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = llm(inputs_embeds=embeds, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step} loss {loss.item():.4f}")


params = [p for p in connector.parameters()] + [p for p in llm.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.05, foreach=True)
train(opt, 3, BATCH)
report("train bf16 autocast foreach adamw")

llm.eval()
connector.eval()
with torch.inference_mode():
    mels, prompt, instr, _ = batch(BATCH, with_answer=False)
    embeds, _ = build(mels, prompt, instr, None)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        out = llm.generate(
            inputs_embeds=embeds,
            attention_mask=torch.ones(embeds.shape[:2], device=device, dtype=torch.long),
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
        )
print(f"generated {tuple(out.shape)}")
del out, embeds
report("generate from inputs_embeds")

del opt
llm.base_model.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.AdamW(params, lr=5e-5, weight_decay=0.05, fused=device == "cuda")
train(opt, 2, BATCH2)
report("checkpointed llm fused adamw batch 32")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")

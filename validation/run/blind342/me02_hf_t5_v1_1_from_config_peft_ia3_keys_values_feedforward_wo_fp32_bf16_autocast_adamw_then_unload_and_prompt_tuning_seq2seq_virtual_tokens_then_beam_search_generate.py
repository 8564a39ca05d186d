"""Two light peft methods on one seq2seq base, one after the other: a T5 v1.1-style
T5ForConditionalGeneration from a T5Config (768 wide, 8 + 8 layers, 12 heads, gated-GELU FFN 2048,
32,128 vocabulary, untied lm_head), fp32 weights. First IA3 (`IA3Config`, task SEQ_2_SEQ_LM) scaling the
attention keys and values and the FFN output projection's input (`target_modules=["k", "v", "wo"]`,
`feedforward_modules=["wo"]`), trained under bf16 autocast with AdamW for 3 steps on 16 x 512 source /
128 target tokens (padded sources, labels -100 on padding). Then `unload()` gives the plain T5 back and
prompt tuning (`PromptTuningConfig`, 40 random-init virtual tokens prepended to the encoder input) is
trained on it for 2 steps, and the prompt-tuned model answers 8 sources with a 4-beam `generate()`.

Phases: 0 model built; 1 IA3 first step; 2 IA3 two more steps; 3 unload + prompt tuning 2 steps;
4 beam search."""

import os

import torch
from peft import IA3Config, PromptTuningConfig, TaskType, get_peft_model
from transformers import T5Config, T5ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3422)
if SMALL:
    config = T5Config(
        vocab_size=256,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
    )
    B, SRC, TGT, VT, G, NEW = 2, 32, 8, 4, 2, 4
else:
    config = T5Config(
        vocab_size=32128,
        d_model=768,
        d_kv=64,
        d_ff=2048,
        num_layers=8,
        num_decoder_layers=8,
        num_heads=12,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
    )
    B, SRC, TGT, VT, G, NEW = 16, 512, 128, 40, 8, 48
config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 0, 0, 1
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def batch():
    lengths = torch.linspace(SRC // 2, SRC, B).long()
    mask = (torch.arange(SRC)[None, :] < lengths[:, None]).long()
    src = torch.randint(2, config.vocab_size, (B, SRC)) * mask
    labels = torch.randint(2, config.vocab_size, (B, TGT))
    labels[:, -TGT // 4 :] = -100
    return src.to(device), mask.to(device), labels.to(device)


def train(model, steps, lr, tag):
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr)
    model.train()
    for step in range(steps):
        src, mask, labels = batch()
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = model(input_ids=src, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"{tag} step {step} loss {loss.item():.4f}")
        del loss
        if step == 0 and steps == 3:
            report(f"{tag} step0")


base = T5ForConditionalGeneration(config).to(device)
report("built")

ia3 = get_peft_model(
    base,
    IA3Config(task_type=TaskType.SEQ_2_SEQ_LM, target_modules=["k", "v", "wo"], feedforward_modules=["wo"]),
)
ia3.print_trainable_parameters()
train(ia3, 3, 3e-3, "ia3")
report("ia3 steps1-2")

base = ia3.unload()
del ia3
prompt = get_peft_model(
    base,
    PromptTuningConfig(task_type=TaskType.SEQ_2_SEQ_LM, num_virtual_tokens=VT, prompt_tuning_init="RANDOM"),
)
prompt.print_trainable_parameters()
train(prompt, 2, 3e-1, "prompt")
report("prompt tuning")

prompt.eval()
src, mask, _ = batch()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    out = prompt.generate(
        input_ids=src[:G],
        attention_mask=mask[:G],
        num_beams=4,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        early_stopping=False,
    )
print("generated", tuple(out.shape))
report("beam search")

"""A small FlexOlmo mixture-of-experts causal LM (FlexOlmoForCausalLM from FlexOlmoConfig: 8 layers of
1024, 16 heads with 4 KV heads, 7 experts of 1024 with 5 active per token as FlexOlmo's default routing,
QK-norm, vocabulary 100,352) fully fine-tuned in pure bf16 with the router's load-balancing loss
(output_router_logits), non-reentrant gradient checkpointing and Adam(fused=True); then served.

Phases: (1) model build + first step at batch 8 x 512; (2) three more steps; (3) assisted decoding
at batch 1 with a 2-layer FlexOlmo draft of the same vocabulary (num_assistant_tokens 6, heuristic
schedule, assistant_confidence_threshold 0.3), 64 new tokens after a 256-token prompt;
(4) top-h sampling (top_h=0.9, temperature 0.8) of 48 tokens for 16 prompts of 128; (5) a shared
384-token system prefix prefilled once into a DynamicCache, copy.deepcopy'd for each of three
user turns (prefix caching), greedy continuations of 32 tokens. 5 phases."""

import copy
import os

import torch
from transformers import DynamicCache, FlexOlmoConfig, FlexOlmoForCausalLM

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(29905)
if SMALL:
    kw = dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    cfg = FlexOlmoConfig(num_hidden_layers=2, **kw)
    draft_cfg = FlexOlmoConfig(num_hidden_layers=1, **kw)
    B, L, PROMPT, NEW, S_B, S_PROMPT, S_NEW, PREFIX, TURN, T_NEW = 2, 64, 16, 8, 2, 16, 6, 32, 8, 4
else:
    kw = dict(
        vocab_size=100352,
        hidden_size=1024,
        intermediate_size=1024,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        pad_token_id=100277,
        eos_token_id=100257,
        bos_token_id=None,
    )
    cfg = FlexOlmoConfig(num_hidden_layers=8, **kw)
    draft_cfg = FlexOlmoConfig(num_hidden_layers=2, **kw)
    B, L, PROMPT, NEW, S_B, S_PROMPT, S_NEW, PREFIX, TURN, T_NEW = 8, 512, 256, 64, 16, 128, 48, 384, 40, 32
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def tokens(*shape):
    return torch.randint(3, 50000 if not SMALL else 500, shape, device=device)


model = FlexOlmoForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
opt = torch.optim.Adam(model.parameters(), lr=2e-5, betas=(0.9, 0.95), eps=1e-6, fused=device == "cuda")

for step in range(4):
    ids = tokens(B, L)
    out = model(input_ids=ids, labels=ids, output_router_logits=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f} aux {out.aux_loss.item():.4f}")
    del out
    if step == 0:
        report("build and first step")
report("moe fine-tune steps")

del opt
model.gradient_checkpointing_disable()
model.eval()
model.config.use_cache = True
draft = FlexOlmoForCausalLM(draft_cfg).to(device=device, dtype=torch.bfloat16).eval()
with torch.inference_mode():
    prompt = tokens(1, PROMPT)
    gen = model.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        assistant_model=draft,
        num_assistant_tokens=6,
        num_assistant_tokens_schedule="heuristic",
        assistant_confidence_threshold=0.3,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
    print(f"assisted {tuple(gen.shape)}")
    del gen
report("assisted decoding with moe draft")

with torch.inference_mode():
    prompts = tokens(S_B, S_PROMPT)
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=True,
        top_h=0.9,
        temperature=0.8,
        top_k=0,
        max_new_tokens=S_NEW,
        min_new_tokens=S_NEW,
    )
    print(f"top-h sampled {tuple(gen.shape)}")
    del gen
report("top-h sampling")

with torch.inference_mode():
    prefix = tokens(1, PREFIX)
    prefix_cache = DynamicCache(config=model.config)
    model(input_ids=prefix, past_key_values=prefix_cache, use_cache=True)
    for turn in range(3):
        full = torch.cat([prefix, tokens(1, TURN + 8 * turn)], dim=1)
        cache = copy.deepcopy(prefix_cache)
        gen = model.generate(
            input_ids=full,
            attention_mask=torch.ones_like(full),
            past_key_values=cache,
            max_new_tokens=T_NEW,
            min_new_tokens=T_NEW,
            do_sample=False,
        )
        print(f"turn {turn} {tuple(gen.shape)} cache {cache.get_seq_length()}")
        del gen, cache
    del prefix_cache
report("shared prefix cache reuse")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")

"""Inference a model-analysis service runs on a LlamaForCausalLM from LlamaConfig (width 1024, 12 layers, 16
heads over 8 key/value heads, SwiGLU 2,816, vocab 32,000, attn_implementation="eager" so that attention
weights exist), built on the host and moved with `.to("cuda", torch.bfloat16)`; no training. Prompts are
left-padded token ids with an attention mask; every generate fixes its length (min_new_tokens ==
max_new_tokens), so no shape depends on the tokens drawn.

1. Set-up: the model, eval().
2. `generate` with the default DynamicCache on 8 prompts of 384 positions (pads 0-96 on the left), greedy, 48
   new tokens, return_dict_in_generate with output_attentions, output_hidden_states and output_scores (every
   step's per-layer attention weights and hidden states kept); then the share of each new token's last-layer
   attention that goes to the prompt, and the cosine similarity of consecutive last-layer hidden states.
3. The same call with an explicit `StaticCache(config, max_cache_len=448)` passed as past_key_values
   (disable_compile=True: no automatic torch.compile of the decoding step), attention weights over all 448
   cache slots each step; every step's argmax compared with the dynamic run's.
4. Logit lens: one forward of the 8 finished sequences (432 positions) under inference_mode with
   output_hidden_states=True; each of the 13 hidden states' last 64 positions through the final RMSNorm and
   lm_head, fp32 log_softmax, KL divergence to the last layer's distribution and top-1 agreement, both moved
   to the host per layer.
5. Attention rollout: forward hooks on every layer's self_attn take the eager attention weights (head mean,
   fp32) and on every mlp copy the output to the host; 16 prompts of 512 tokens under inference_mode; the
   rollout is the product over layers of 0.5 * A + 0.5 * I (row-normalised) by `torch.bmm`.

Phases: set-up | dynamic-cache generate with attentions | static-cache generate with attentions | logit lens |
attention rollout with hooks. 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34103)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
if SMALL:
    HID, LAYERS, HEADS, KV, FF = 128, 2, 4, 2, 256
    B, PROMPT, MAXPAD, NEW, LENS, RB, RS = 2, 24, 6, 4, 8, 2, 32
else:
    HID, LAYERS, HEADS, KV, FF = 1024, 12, 16, 8, 2816
    B, PROMPT, MAXPAD, NEW, LENS, RB, RS = 8, 384, 96, 48, 64, 16, 512
V, PAD = 32000, 0


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"allocated {torch.cuda.memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


config = LlamaConfig(
    vocab_size=V,
    hidden_size=HID,
    intermediate_size=FF,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    max_position_embeddings=4096,
    pad_token_id=PAD,
    bos_token_id=1,
    eos_token_id=2,
    attn_implementation="eager",
)
model = LlamaForCausalLM(config).to(device, dtype).eval()
model.generation_config.pad_token_id = PAD
report("llama eager model")

pads = torch.randint(0, MAXPAD + 1, (B,))
input_ids = torch.randint(3, V, (B, PROMPT))
attention_mask = torch.ones(B, PROMPT, dtype=torch.long)
for row, n in enumerate(pads.tolist()):
    input_ids[row, :n] = PAD
    attention_mask[row, :n] = 0
input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
gen_kwargs = dict(
    do_sample=False,
    max_new_tokens=NEW,
    min_new_tokens=NEW,
    return_dict_in_generate=True,
    output_attentions=True,
    output_hidden_states=True,
    output_scores=True,
)

with torch.no_grad():
    dyn = model.generate(input_ids=input_ids, attention_mask=attention_mask, **gen_kwargs)
    to_prompt = torch.stack(
        [step[-1][:, :, -1, :PROMPT].float().sum(-1).mean(1) for step in dyn.attentions[1:]], 1
    )
    last = torch.stack([step[-1][:, -1].float() for step in dyn.hidden_states], 1)
    drift = F.cosine_similarity(last[:, 1:], last[:, :-1], dim=-1)
print(
    "dynamic",
    tuple(dyn.sequences.shape),
    len(dyn.attentions),
    tuple(dyn.attentions[0][0].shape),
    tuple(to_prompt.shape),
    tuple(drift.shape),
)
dyn_scores = torch.stack(dyn.scores, 1)
sequences = dyn.sequences
del dyn, to_prompt, last, drift
report("generate dynamic cache with attentions and hidden states")

with torch.no_grad():
    cache = StaticCache(config=model.config, max_cache_len=PROMPT + NEW)
    sta = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        past_key_values=cache,
        disable_compile=True,
        **gen_kwargs,
    )
    agree = (torch.stack(sta.scores, 1).argmax(-1) == dyn_scores.argmax(-1)).float().mean()
print(
    "static",
    tuple(sta.sequences.shape),
    tuple(sta.attentions[-1][0].shape),
    f"argmax agreement {agree.item():.3f}",
)
del sta, cache, agree, dyn_scores
report("generate static cache with attentions")

with torch.inference_mode():
    full_mask = torch.cat([attention_mask, torch.ones(B, NEW, dtype=attention_mask.dtype, device=device)], 1)
    out = model(input_ids=sequences, attention_mask=full_mask, output_hidden_states=True, logits_to_keep=LENS)
    final = out.logits.float().log_softmax(-1)
    kls, agree = [], []
    for h in out.hidden_states:
        lp = model.lm_head(model.model.norm(h[:, -LENS:])).float().log_softmax(-1)
        kls.append(F.kl_div(lp, final, log_target=True, reduction="batchmean").cpu())
        agree.append((lp.argmax(-1) == final.argmax(-1)).float().mean().cpu())
        del lp
    del out, final
print("logit lens KL per layer", [round(k.item(), 2) for k in kls][:4], len(agree))
report("logit lens over every layer")

heads_mean, mlp_dump = [], []


def grab_attention(module, args, output):
    heads_mean.append(output[1].float().mean(1))


def dump_mlp(module, args, output):
    mlp_dump.append(output[:, -1].to("cpu"))


hooks = [layer.self_attn.register_forward_hook(grab_attention) for layer in model.model.layers]
hooks += [layer.mlp.register_forward_hook(dump_mlp) for layer in model.model.layers]
with torch.inference_mode():
    ids = torch.randint(3, V, (RB, RS), device=device)
    logits = model(input_ids=ids, logits_to_keep=1).logits
    eye = torch.eye(RS, device=device)
    rollout = eye.expand(RB, RS, RS)
    for a in heads_mean:
        a = 0.5 * a + 0.5 * eye
        rollout = torch.bmm(a / a.sum(-1, keepdim=True), rollout)
    relevance = rollout[:, -1].cpu()
for h in hooks:
    h.remove()
print("rollout", tuple(rollout.shape), tuple(relevance.shape), len(mlp_dump), tuple(logits.shape))
heads_mean.clear()
del rollout, logits
report("attention rollout with forward hooks")

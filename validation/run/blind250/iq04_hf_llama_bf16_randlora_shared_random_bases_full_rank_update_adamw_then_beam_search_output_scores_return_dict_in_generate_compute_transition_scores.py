"""RandLoRA, then beam search that keeps its scores: a from-config Llama (8 layers, d 1024, 16 heads with
4 KV heads, MLP 2816, vocab 32000, bf16 weights) with peft's RandLoRA (r 32 on q/k/v/o_proj: frozen
random bases shared by all layers, learnable diagonal scalings: peft/tuners/randlora/layer.py builds
the update from the shared bases in every forward through its own autograd function). AdamW, batch 4
x 512, three steps. Then beam search (4 beams, 3 prompts of 48 tokens, 24 new tokens with
min_new_tokens = max_new_tokens) with output_scores=True and return_dict_in_generate=True on the
adapted model, and `compute_transition_scores` over the kept scores; then the same prompts through
the merged model (merge_and_unload) with greedy decoding. 4 phases."""

import torch
from peft import RandLoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(2504)
V, T, B = 32000, 512, 4


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = LlamaConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=2048,
    pad_token_id=0,
    eos_token_id=2,
    bos_token_id=1,
)
model = LlamaForCausalLM(cfg).to(torch.bfloat16)
model = get_peft_model(model, RandLoraConfig(r=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
model.print_trainable_parameters()
model.cuda()
ids = torch.randint(3, V, (B, T), device="cuda")
report("setup")

opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
model.train()
for _ in range(3):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
report("train_randlora_3_steps")

model.eval()
prompts = torch.randint(3, V, (3, 48), device="cuda")
with torch.no_grad():
    out = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        num_beams=4,
        max_new_tokens=24,
        min_new_tokens=24,
        do_sample=False,
        early_stopping=True,
        output_scores=True,
        return_dict_in_generate=True,
    )
    trans = model.base_model.model.compute_transition_scores(
        out.sequences, out.scores, out.beam_indices, normalize_logits=False
    )
print(tuple(out.sequences.shape), len(out.scores), tuple(trans.shape))
del out, trans
report("beam_search_output_scores")

del opt
merged = model.merge_and_unload()
with torch.no_grad():
    g = merged.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=24,
        min_new_tokens=24,
        do_sample=False,
    )
print(tuple(g.shape))
report("merged_greedy")

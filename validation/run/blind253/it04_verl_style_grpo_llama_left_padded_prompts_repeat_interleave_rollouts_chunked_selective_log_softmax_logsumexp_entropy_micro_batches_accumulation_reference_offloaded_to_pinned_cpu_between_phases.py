"""A verl-style GRPO iteration by hand with one colocated process: a Llama actor from its config
(hidden 1,024, 6 layers, 16 heads with 8 KV heads, vocab 48,000, sdpa) in bfloat16, full fine-tuning
with AdamW (foreach); a reference Llama of the same config kept on the host in pinned memory and
moved to the GPU only for its log-probability pass, then back (`.to("cpu")`, as verl's parameter
offload does), with `torch.cuda.empty_cache()` after each move. Prompts: a left-padded batch of 8
(lengths 40 to 120 ids, padding in the attention mask), repeated G=4 times with `repeat_interleave`;
rollouts by `generate()` in eval mode (`do_sample=True`, top_p 0.95, 96 new tokens with
min_new_tokens equal, eos disabled, KV cache); position ids from the mask's cumulative sum; per-token
log-probabilities by a chunked selective log-softmax (logsumexp over 8 rows at a time, as TRL's
`selective_log_softmax` for bf16 logits) and the token entropy in fp32 over micro-batches of 8 with
gradient accumulation (4 micro-batches, non-reentrant checkpointing), rewards from a rule on the GPU,
group-normalised advantages, clipped loss with a KL term (k3) and an entropy bonus; 2 iterations.
Then the actor's parameters gathered into a fresh bf16 state dict on the GPU (a weight sync to an
inference engine), freed again.

Sampled ids depend on values; shapes do not. 5 phases."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(2534)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


V, G, NEW, MICRO, BETA, EPS, ENT = 48000, 4, 96, 8, 0.02, 0.2, 0.001
LENGTHS = (40, 56, 64, 72, 88, 96, 104, 120)
config = LlamaConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=6,
    num_attention_heads=16,
    num_key_value_heads=8,
    max_position_embeddings=1024,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
config._attn_implementation = "sdpa"
actor = LlamaForCausalLM(config).to("cuda", torch.bfloat16)
reference = LlamaForCausalLM(config).to(torch.bfloat16)
reference.load_state_dict(actor.state_dict())
reference.eval().requires_grad_(False)
for p in reference.parameters():
    p.data = p.data.pin_memory()
opt = torch.optim.AdamW(actor.parameters(), lr=1e-6, foreach=True)
report("load_actor_reference_on_host")

P = max(LENGTHS)
ids = torch.zeros(len(LENGTHS), P, dtype=torch.long)
mask = torch.zeros_like(ids)
for i, n in enumerate(LENGTHS):
    ids[i, P - n :] = torch.randint(3, V, (n,))
    mask[i, P - n :] = 1
ids, mask = ids.cuda(), mask.cuda()


def selective_log_softmax(logits, index):
    out = []
    for lg, ix in zip(logits.split(8), index.split(8)):
        lg = lg.float()
        out.append(lg.gather(-1, ix.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(lg, dim=-1))
    return torch.cat(out)


def logps_and_entropy(m, seqs, attn, with_entropy):
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    logits = m(input_ids=seqs, attention_mask=attn, position_ids=pos, use_cache=False).logits[:, P - 1 : -1]
    lp = selective_log_softmax(logits, seqs[:, P:])
    ent = None
    if with_entropy:
        f = logits.float()
        ent = torch.logsumexp(f, -1) - (f.softmax(-1) * f).sum(-1)
    return lp, ent


for it in range(2):
    actor.eval()
    actor.gradient_checkpointing_disable()
    prompts, pmask = ids.repeat_interleave(G, 0), mask.repeat_interleave(G, 0)
    with torch.no_grad():
        seqs = actor.generate(
            input_ids=prompts,
            attention_mask=pmask,
            do_sample=True,
            top_p=0.95,
            top_k=0,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            eos_token_id=None,
            pad_token_id=0,
        )
    attn = torch.cat([pmask, torch.ones(seqs.shape[0], NEW, dtype=pmask.dtype, device="cuda")], 1)
    rewards = (seqs[:, P:] % 7 == 0).float().mean(-1)
    grouped = rewards.view(-1, G)
    adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)).view(-1)

    reference.to("cuda")
    with torch.no_grad():
        ref_lp = torch.cat(
            [
                logps_and_entropy(reference, s, a, False)[0]
                for s, a in zip(seqs.split(MICRO), attn.split(MICRO))
            ]
        )
        old_lp = torch.cat(
            [logps_and_entropy(actor, s, a, False)[0] for s, a in zip(seqs.split(MICRO), attn.split(MICRO))]
        )
    reference.to("cpu")
    torch.cuda.empty_cache()

    actor.train()
    actor.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    n_micro = seqs.shape[0] // MICRO
    for s, a, r, o, adv_m in zip(
        seqs.split(MICRO), attn.split(MICRO), ref_lp.split(MICRO), old_lp.split(MICRO), adv.split(MICRO)
    ):
        lp, ent = logps_and_entropy(actor, s, a, True)
        ratio = torch.exp(lp - o)
        surr = torch.min(ratio * adv_m[:, None], ratio.clamp(1 - EPS, 1 + EPS) * adv_m[:, None])
        kl = torch.exp(r - lp) - (r - lp) - 1
        loss = (-surr + BETA * kl - ENT * ent).mean() / n_micro
        loss.backward()
    torch.nn.utils.clip_grad_norm_(actor.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    del prompts, pmask, seqs, attn, rewards, grouped, adv, ref_lp, old_lp, lp, ent, ratio, surr, kl, loss
    torch.cuda.empty_cache()
    if it == 0:
        report("grpo_iteration_1")
report("grpo_iteration_2")

sync = {k: v.detach().clone() for k, v in actor.state_dict().items()}
report("weight_sync_copy")
del sync
torch.cuda.empty_cache()
report("after_sync_freed")

"""peft multitask prompt tuning (MultitaskPromptTuningConfig: 32 virtual tokens shared by 4 tasks, each task
scaling them by its own rank-1 factors; forward and generate take task_ids) on a GemmaForCausalLM from a
small GemmaConfig (1536 wide, 10 layers, 8 heads of 256 with 1 KV head, GeGLU, tied 64k embeddings), the
base frozen in bf16, the prompt parameters in fp32, bf16 autocast, fused Adam, 3 steps on right-padded
batches of 12 x 448 mixing the four tasks. Then sampling generate() (top_p 0.95, temperature 0.7) with
task_ids and user-built logits processing: a LogitsProcessorList holding a hand-written LogitsProcessor
that masks everything outside an allowed vocabulary (a boolean mask kept on the GPU) and transformers'
NoRepeatNGramLogitsProcessor, sequence_bias on single tokens and pairs, and a hand-written
StoppingCriteria returning a per-row bool tensor (never true: fixed length), return_dict_in_generate with
output_scores. Last, a verbalizer classification by log-likelihood: every prompt is scored against 5
candidate label strings of 6 tokens (prompts repeat_interleave'd, task_ids too) under inference_mode.

Phases: 0 model and prompt encoder built; 1 first step; 2 two more steps; 3 constrained sampling
generate; 4 verbalizer scoring."""

import os

import torch
from peft import MultitaskPromptTuningConfig, MultitaskPromptTuningInit, get_peft_model
from transformers import (
    GemmaConfig,
    GemmaForCausalLM,
    LogitsProcessor,
    LogitsProcessorList,
    NoRepeatNGramLogitsProcessor,
    StoppingCriteria,
    StoppingCriteriaList,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3113)
if SMALL:
    config = GemmaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
    )
    B, S, G, PL, NEW, K, LBL, NV = 4, 32, 4, 12, 6, 3, 3, 8
else:
    config = GemmaConfig(
        vocab_size=64000,
        hidden_size=1536,
        intermediate_size=6144,
        num_hidden_layers=10,
        num_attention_heads=8,
        num_key_value_heads=1,
        head_dim=256,
        max_position_embeddings=2048,
    )
    B, S, G, PL, NEW, K, LBL, NV = 12, 448, 16, 160, 48, 5, 6, 32
config.pad_token_id, config.eos_token_id, config.bos_token_id = 0, 1, 2
config._attn_implementation = "sdpa"
NUM_TASKS = 4
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class AllowedVocabulary(LogitsProcessor):
    """Keeps only an allowed set of token ids (e.g. a constrained output alphabet)."""

    def __init__(self, allowed_ids, vocab_size, device):
        self.blocked = torch.ones(vocab_size, dtype=torch.bool, device=device)
        self.blocked[allowed_ids.to(device)] = False

    def __call__(self, input_ids, scores):
        return scores.masked_fill(self.blocked, float("-inf"))


class FixedBudget(StoppingCriteria):
    """Stops a row only at a token budget; generation is fixed-length here."""

    def __init__(self, budget):
        self.budget = budget

    def __call__(self, input_ids, scores, **kwargs):
        done = input_ids.shape[-1] >= self.budget
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


base = GemmaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
mpt = MultitaskPromptTuningConfig(
    task_type="CAUSAL_LM",
    num_virtual_tokens=NV,
    num_tasks=NUM_TASKS,
    num_ranks=1,
    prompt_tuning_init=MultitaskPromptTuningInit.RANDOM,
)
model = get_peft_model(base, mpt)
for p in model.parameters():
    if p.requires_grad:
        p.data = p.data.float()
model.print_trainable_parameters()
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.Adam(params, lr=3e-2, fused=device == "cuda")
report("built")

lengths = torch.linspace(S // 3, S, B).long()
model.train()
for step in range(3):
    ids = torch.randint(3, config.vocab_size, (B, S))
    mask = (torch.arange(S)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    labels = ids.masked_fill(mask == 0, -100)
    task_ids = (torch.arange(B) + step) % NUM_TASKS
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            labels=labels.to(device),
            task_ids=task_ids.to(device),
        )
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out
    if step == 0:
        report("step0")
report("steps1-2")

model.eval()
prompts = torch.randint(3, config.vocab_size, (G, PL))
plen = torch.linspace(PL // 4, PL, G).long()
attn = (torch.arange(PL)[None, :] >= (PL - plen)[:, None]).long()
prompts = prompts * attn
task_ids = torch.arange(G) % NUM_TASKS
allowed = torch.randperm(config.vocab_size - 3)[: config.vocab_size // 8] + 3
processors = LogitsProcessorList(
    [AllowedVocabulary(allowed, config.vocab_size, device), NoRepeatNGramLogitsProcessor(3)]
)
a, b, c = allowed[:3].tolist()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    gen = model.generate(
        input_ids=prompts.to(device),
        attention_mask=attn.to(device),
        task_ids=task_ids.to(device),
        logits_processor=processors,
        stopping_criteria=StoppingCriteriaList([FixedBudget(PL + NEW)]),
        sequence_bias={(a,): -4.0, (b, c): 3.0},
        do_sample=True,
        top_p=0.95,
        top_k=0,
        temperature=0.7,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        return_dict_in_generate=True,
        output_scores=True,
        pad_token_id=0,
        eos_token_id=1,
    )
print("generated", tuple(gen.sequences.shape), "scores", len(gen.scores))
del gen
report("generate")

labels_tok = torch.randint(3, config.vocab_size, (K, LBL))
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    ids = torch.cat([prompts.repeat_interleave(K, 0), labels_tok.repeat(G, 1)], 1).to(device)
    am = torch.cat([attn.repeat_interleave(K, 0), torch.ones(G * K, LBL, dtype=torch.long)], 1).to(device)
    logits = model(input_ids=ids, attention_mask=am, task_ids=task_ids.repeat_interleave(K).to(device)).logits
    logp = logits[:, -LBL - 1 : -1].float().log_softmax(-1)
    tgt = ids[:, -LBL:]
    score = logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1).sum(-1).view(G, K)
    pred = score.argmax(-1)
print("verbalizer predictions", pred.tolist())
report("score")

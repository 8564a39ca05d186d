"""Generation utilities on a HF CTRL LM (CTRLLMHeadModel: sinusoidal positions, pre-LN blocks, tied
embedding head) built from a small config and served in fp16, exercising generate()'s dict outputs:
greedy decoding with return_dict_in_generate + output_logits (the raw per-step logits kept as a tuple of
(batch, vocab) fp16 tensors), min_p sampling with temperature and num_return_sequences (the batch is
expanded four-fold before the prefill), and beam search with output_scores whose per-step scores feed
model.compute_transition_scores (beam_indices, normalize_logits=False). Last, the generated sequences are
scored by one teacher-forced forward (log_softmax + gather of the continuation tokens).

Phases: 0 model built in fp16; 1 greedy with output_logits; 2 min_p sampling x4 per prompt; 3 beam
search (4 beams) with output_scores and transition scores; 4 teacher-forced scoring of the greedy outputs."""

import torch
from transformers import CTRLConfig, CTRLLMHeadModel

torch.manual_seed(3063)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


config = CTRLConfig(vocab_size=32000, n_positions=1024, n_embd=1024, dff=4096, n_layer=12, n_head=16)
config.pad_token_id = 0
model = CTRLLMHeadModel(config).to(device=device, dtype=torch.float16).eval()
print("params", sum(p.numel() for p in model.parameters()))
report("built")

prompts = torch.randint(1, config.vocab_size, (8, 128), device=device)
attention_mask = torch.ones_like(prompts)

with torch.no_grad():
    greedy = model.generate(
        input_ids=prompts,
        attention_mask=attention_mask,
        max_new_tokens=64,
        do_sample=False,
        return_dict_in_generate=True,
        output_logits=True,
        pad_token_id=0,
    )
logits = torch.stack(greedy.logits, dim=1)
print("greedy", tuple(greedy.sequences.shape), "logits", tuple(logits.shape), logits.dtype)
del logits
report("greedy output_logits")

with torch.no_grad():
    sampled = model.generate(
        input_ids=prompts[:4],
        attention_mask=attention_mask[:4],
        max_new_tokens=48,
        do_sample=True,
        temperature=0.8,
        top_k=0,
        min_p=0.05,
        num_return_sequences=4,
        pad_token_id=0,
    )
print("sampled", tuple(sampled.shape))
report("min_p sampling")

with torch.no_grad():
    beams = model.generate(
        input_ids=prompts[:4],
        attention_mask=attention_mask[:4],
        max_new_tokens=32,
        num_beams=4,
        do_sample=False,
        length_penalty=1.0,
        return_dict_in_generate=True,
        output_scores=True,
        pad_token_id=0,
    )
    transition = model.compute_transition_scores(
        beams.sequences, beams.scores, beams.beam_indices, normalize_logits=False
    )
print("beams", tuple(beams.sequences.shape), "transition", tuple(transition.shape))
print("sequence scores", beams.sequences_scores.float().cpu().shape)
del beams, transition
report("beam search transition scores")

with torch.no_grad():
    seqs = greedy.sequences
    out = model(input_ids=seqs, attention_mask=torch.ones_like(seqs))
    logp = torch.log_softmax(out.logits[:, prompts.shape[1] - 1 : -1].float(), dim=-1)
    cont = seqs[:, prompts.shape[1] :]
    token_logp = logp.gather(-1, cont.unsqueeze(-1)).squeeze(-1)
    print("mean logp", token_logp.sum(-1).mean().item())
report("teacher-forced scoring")

"""Run one LLM workload of a case list on a real GPU, one fresh process per case, and print one
JSON line per phase (torch.cuda.memory_stats() at its end after reset_peak_memory_stats() at its
start): what `vramscope estimate` answers for the same case.

    python3 llm_cases.py CASES.json NAME OUTDIR      # -> OUTDIR/NAME.jsonl (and the lines on stdout)

A case is `validation/hf_cases.py`'s (name, config, task, mode, batch, seq, weights, autocast,
optimizer, momentum, lr, checkpointing, steps, alloc_conf) with, for `mode: train`:
- `optimizer`: adamw | adam | sgd | adagrad | rmsprop | adafactor (`torch.optim.AdamW`, ...,
  `RMSprop`, `Adafactor`), built as `OPT(model.parameters(), lr=lr[, momentum=m])` plus
  `optimizer_impl`: foreach (no argument: PyTorch's default on CUDA; Adafactor: `foreach=True`,
  its default being the for-loop), for-loop (`foreach=False`) or fused (`fused=True`).
The phases are hf_cases.py's: `load` (from_config(dtype, attn_implementation="sdpa").cuda(), the
optimizer, the inputs), then per step `forward{i}`, `backward{i}`, `step{i}`, `zero_grad{i}`.

With `lora` ({r, alpha, targets, dropout}): `model = get_peft_model(model, LoraConfig(r=r,
lora_alpha=alpha, target_modules=targets or None (`["all-linear"]`: "all-linear"), lora_dropout=dropout, task_type="CAUSAL_LM"))`
right after `.cuda()`, the optimizer over the parameters that require grad, and with
checkpointing also `model.enable_input_require_grads()`.

For `mode: infer`: hf_cases.py's (`model.eval()`, then per pass `forward{i}`: under
`torch.no_grad()`, `logits = model(input_ids=input_ids).logits; del logits`; `steps` passes,
default 2). With TRACE=1 in the environment, the allocator's history is recorded from the start
and dumped to OUTDIR/NAME.pickle (`torch.cuda.memory._dump_snapshot`).

For `mode: generate` (`new_tokens` N, `cache` dynamic or static: `cache_implementation="static"`
with `disable_compile=True`, and for a config with `layer_types` a line with the order of
`set(layer_types)`, in which `create_masks_for_generate` makes its masks): `load` (the model, `model.eval()`, then
`input_ids` only), then `out = model.generate(input_ids, max_new_tokens=N, min_new_tokens=N,
do_sample=False)` under no context of ours (generate's own `torch.no_grad()`), split by a forward
hook on the model at the end of its first call: `prefill` (from the call to that hook: the
prompt's forward, its logits and cache alive) and `decode` (from there until generate returns,
`out` alive). With `per_step: true`, the hook also ends a step at each later call (one line with
`step` k: memory_stats() there, then reset_peak_memory_stats(); the last step ends when generate
returns), the twin's `decode_steps` cut; the decode phase's peaks are then the steps' highest.
A config with a pad token (gemma2, gemma3_text) gets a prompt without it, as the twin assumes
(generate would infer a padding mask from it).
"""
import json
import os
import sys


def stats(torch):
    s = torch.cuda.memory_stats()
    return dict(allocated_bytes=s.get("allocated_bytes.all.current", 0),
                peak_allocated_bytes=s.get("allocated_bytes.all.peak", 0),
                reserved_bytes=s.get("reserved_bytes.all.current", 0),
                peak_reserved_bytes=s.get("reserved_bytes.all.peak", 0),
                requested_bytes=s.get("requested_bytes.all.current", 0))


def _targets(t):
    # ["all-linear"] is peft's string form
    return "all-linear" if t == ["all-linear"] else (t or None)


def make_optimizer(torch, case, params):
    name = case.get("optimizer", "adamw")
    impl = case.get("optimizer_impl", "foreach")
    cls = dict(adamw=torch.optim.AdamW, adam=torch.optim.Adam, sgd=torch.optim.SGD,
               adagrad=torch.optim.Adagrad, rmsprop=torch.optim.RMSprop,
               adafactor=torch.optim.Adafactor)[name]
    kw = dict(lr=case.get("lr", 1e-4))
    if name in ("sgd", "rmsprop"):
        kw["momentum"] = case.get("momentum", 0.0)
    if name == "adafactor" and impl in ("foreach", "for-loop"):
        # (Adafactor's foreach=None runs the for-loop: say which one)
        kw["foreach"] = impl == "foreach"
    elif impl == "fused":
        kw["fused"] = True
    elif impl == "for-loop":
        kw["foreach"] = False
    elif impl != "foreach":
        raise SystemExit(f"optimizer_impl {impl!r}: expected foreach, for-loop or fused")
    return cls(params, **kw)


def main():
    cases_path, name, outdir = sys.argv[1:4]
    with open(cases_path) as f:
        case = next(c for c in json.load(f) if c["name"] == name)
    if case.get("alloc_conf"):
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = case["alloc_conf"]
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    torch.manual_seed(0)
    torch.cuda.init()
    os.makedirs(outdir, exist_ok=True)
    out = open(os.path.join(outdir, name + ".jsonl"), "w")

    def emit(obj):
        line = json.dumps(obj)
        print(line, flush=True)
        out.write(line + "\n")
        out.flush()

    cfg = dict(case["config"])
    model_type = cfg.pop("model_type")
    config = AutoConfig.for_model(model_type, **cfg)
    emit(dict(case=name, env=dict(torch=torch.__version__, transformers=transformers.__version__,
                                  cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(),
                                  total=torch.cuda.get_device_properties(0).total_memory),
              config=config.to_dict()))
    wdt = dict(fp32=torch.float32, bf16=torch.bfloat16, fp16=torch.float16)[case.get("weights", "fp32")]
    adt = case.get("autocast")
    adt = dict(bf16=torch.bfloat16, fp16=torch.float16)[adt] if adt else None
    b = case["batch"]
    cur = [None]

    def begin(phase):
        cur[0] = phase
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def end():
        torch.cuda.synchronize()
        emit(dict(case=name, phase=cur[0], **stats(torch)))

    if os.environ.get("TRACE"):
        # the allocator's history, for reading back where the twin differs (host-side only)
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    try:
        begin("load")
        auto = dict(causal=AutoModelForCausalLM, mlm=AutoModelForMaskedLM)[case["task"]]
        model = auto.from_config(config, dtype=wdt, attn_implementation="sdpa").cuda()
        if case.get("lora"):
            from peft import LoraConfig, get_peft_model
            lc = case["lora"]
            model = get_peft_model(model, LoraConfig(r=lc["r"], lora_alpha=lc.get("alpha", 8),
                                                     target_modules=_targets(lc.get("targets")),
                                                     lora_dropout=lc.get("dropout", 0.0), task_type="CAUSAL_LM"))
        if case["mode"] == "train":
            opt = make_optimizer(torch, case, [p for p in model.parameters() if p.requires_grad])
        if case["mode"] == "generate":
            model.eval()
        pad = getattr(config, "pad_token_id", None)
        if case["mode"] == "generate" and pad is not None:
            # a prompt without the pad token (else generate infers a padding mask from it)
            # (drawn on the CPU: the device gets the one tensor, as randint on it makes)
            ids = torch.randint(0, config.vocab_size - 1, (b, case["seq"]))
            input_ids = (ids + (ids >= pad).long()).to("cuda")
        else:
            input_ids = torch.randint(0, config.vocab_size, (b, case["seq"]), device="cuda")
        if case["mode"] != "generate":
            labels = input_ids.clone()
        end()
        if case["mode"] == "train":
            if case.get("checkpointing"):
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False},
                                                    every_n_layers=case.get("checkpointing_every", 1))
                if case.get("lora"):
                    model.enable_input_require_grads()
            model.train()
            for i in range(case.get("steps", 3)):
                begin(f"forward{i}")
                if adt is not None:
                    with torch.autocast("cuda", dtype=adt):
                        loss = model(input_ids=input_ids, labels=labels).loss
                else:
                    loss = model(input_ids=input_ids, labels=labels).loss
                end()
                begin(f"backward{i}")
                loss.backward()
                del loss
                end()
                begin(f"step{i}")
                opt.step()
                end()
                begin(f"zero_grad{i}")
                opt.zero_grad(set_to_none=True)
                end()
        elif case["mode"] == "generate":
            calls = [0]
            step_peaks = [0, 0]

            def step_end():
                # per_step: step k ends where forward k+1 returns (the last at generate's end)
                torch.cuda.synchronize()
                st = stats(torch)
                emit(dict(case=name, phase="decode", step=calls[0] - 1, **st))
                step_peaks[0] = max(step_peaks[0], st["peak_allocated_bytes"])
                step_peaks[1] = max(step_peaks[1], st["peak_reserved_bytes"])
                torch.cuda.reset_peak_memory_stats()

            def hook(module, args, output):
                if calls[0] == 0:
                    end()
                    begin("decode")
                elif case.get("per_step"):
                    step_end()
                calls[0] += 1

            handle = model.register_forward_hook(hook)
            kw = dict(max_new_tokens=case["new_tokens"], min_new_tokens=case["new_tokens"], do_sample=False)
            if case.get("cache", "dynamic") == "static":
                # eager, as the twin runs it (a static cache would otherwise compile the decode forward)
                kw["cache_implementation"] = "static"
                kw["disable_compile"] = True
                if hasattr(config, "layer_types"):
                    # create_masks_for_generate iterates set(layer_types): its order varies with the hash seed
                    emit(dict(case=name, mask_order=list(set(config.layer_types))))
            begin("prefill")
            seqs = model.generate(input_ids, **kw)
            if case.get("per_step"):
                step_end()
                st = stats(torch)
                st["peak_allocated_bytes"], st["peak_reserved_bytes"] = step_peaks
                emit(dict(case=name, phase=cur[0], **st))
            else:
                end()
            handle.remove()
            emit(dict(case=name, forwards=calls[0], sequences=list(seqs.shape)))
            del seqs
        elif case["mode"] == "infer":
            # hf_cases.py's inference: per pass, under torch.no_grad()
            model.eval()
            for i in range(case.get("steps", 2)):
                begin(f"forward{i}")
                with torch.no_grad():
                    logits = model(input_ids=input_ids).logits
                    del logits
                end()
        else:
            raise SystemExit(f"mode {case['mode']!r}")
    except torch.OutOfMemoryError as e:
        emit(dict(case=name, phase=cur[0], error="oom", message=str(e).splitlines()[0], **stats(torch)))
    if os.environ.get("TRACE"):
        torch.cuda.memory._dump_snapshot(os.path.join(outdir, name + ".pickle"))
    out.close()


if __name__ == "__main__":
    main()

"""Record the memory of every rank of an FSDP2 or DDP training run, one JSON line per rank per phase.

    torchrun --standalone --nproc_per_node N multi_cases.py CASES.json NAME OUTDIR

Works for any N (one process per GPU). CASES.json (multi_cases.json) lists workloads: the fields of
validation/hf_cases.json (`config`, `batch` per rank, `seq`, `weights`, `checkpointing`, `steps`;
AdamW) plus `parallel`: "fsdp" or "ddp", and for FSDP `param_dtype` (null | bf16 | fp16, with
`reduce_dtype=float32`), `reshard` (default true: `reshard_after_forward=None`, FSDP2's default,
True for the layers and False for the root; false: `reshard_after_forward=False` everywhere),
`cpu_offload` (CPUOffloadPolicy()); for DDP `bucket_mb` (default 25) and `grad_as_bucket_view`;
and for either `task` (causal, the default | mlm | image, as validation/hf_cases.py), `mode` (train,
the default | infer | generate), `grad` (infer: no_grad, the default | enabled), `accumulation` (K
micro-batches per step, default 1) and `autocast` (null | bf16 | fp16); `optimizer`, `optimizer_impl`
and `momentum` (validation/llm/llm_cases.py's `make_optimizer`: adamw, the default | adam | sgd |
adagrad | rmsprop | adafactor, over the parameters that require grad); `lora` ({r, alpha, targets,
dropout}, llm_cases.py's `get_peft_model(model, LoraConfig(...))`: FSDP on the CPU model before
`fully_shard`, DDP right after `.cuda()`; with checkpointing also `model.enable_input_require_grads()`);
for DDP `find_unused` (`find_unused_parameters=True`); `new_tokens` for `mode: generate` (DDP:
`wrapped.module.generate(input_ids, max_new_tokens=N, min_new_tokens=N, do_sample=False)` after
`model.eval()`, split as llm_cases.py splits it by a forward hook on the model: `prefill`, `decode`).

Each rank runs, in one fresh process (torchrun):
- `init`: `torch.cuda.set_device(local_rank)`, `torch.cuda.init()`, then
  `dist.init_process_group("nccl", device_id=...)` (NCCL's communicator made at once);
- `load`: `AutoModelForCausalLM.from_config(config, dtype=W, attn_implementation="sdpa")` on the
  CPU; FSDP: `fully_shard(layer)` for every decoder layer, then `fully_shard(model)` (as the FSDP2
  tutorial and torchtitan do), each moving its parameters to the GPU and sharding them; DDP:
  `.cuda()` then `DistributedDataParallel(model, device_ids=[local_rank], bucket_cap_mb=...,
  gradient_as_bucket_view=...)`; `torch.optim.AdamW(model.parameters())`; the inputs
  `input_ids` (batch, seq) from `torch.randint` (each rank its own seed) and `labels = input_ids.clone()`;
- per step i: `forward{i}` (`loss = model(input_ids=..., labels=...).loss`), `backward{i}`
  (`loss.backward(); del loss`), `step{i}` (`opt.step()`), `zero_grad{i}`
  (`opt.zero_grad(set_to_none=True)`). With `accumulation` K: `forward{i}.{m}` and
  `backward{i}.{m}` for m < K, the first K - 1 not syncing gradients (FSDP:
  `model.set_requires_gradient_sync(m == K - 1)` before the forward; DDP: forward and backward
  inside `with wrapped.no_sync():`), then `step{i}` and `zero_grad{i}`. With `autocast`, the
  forward under `torch.autocast("cuda", dtype=...)`. The layers FSDP shards: `model.model.layers`
  (GPT-2: `model.transformer.h`), else every transformers `GradientCheckpointingLayer`;
- generate: `load` (the inputs are `input_ids` only), `prefill`, `decode` (above);
- infer: `wrapped.eval()`, then per pass `forward{i}` (`steps`, default 2) under the `grad`
  context: `logits = wrapped(**inputs).logits; del logits` (no labels).
Each phase starts with `torch.cuda.reset_peak_memory_stats()` and ends with a synchronize; its line
holds memory_allocated, max_memory_allocated, memory_reserved, the reserved peak, requested bytes
and `device_used_bytes` = total - free of `cudaMemGetInfo` (this process is alone on its GPU, so this
is its CUDA context, NCCL's buffers and the allocator's segments). The `init` lines hold
`device_used_bytes` after `torch.cuda.init()` (`context_bytes`) and after the process group
(`nccl_init_bytes`).

Writes OUTDIR/NAME.rank{R}.jsonl (one line per phase) and OUTDIR/NAME.rank{R}.trace.json, the
allocator trace from the start of `load` ([action, addr, size, stream, innermost frames] per entry).
"""
import contextlib
import json
import os
import sys


def main():
    cases_path, name, outdir = sys.argv[1:4]
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "llm"))
    from llm_cases import _targets, make_optimizer
    with open(cases_path) as f:
        case = next(c for c in json.load(f) if c["name"] == name)
    import torch
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    torch.cuda.init()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    context_bytes = total - free
    import torch.distributed as dist
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    nccl_init_bytes = total - free
    import transformers
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForImageClassification,
        AutoModelForMaskedLM,
    )
    torch.manual_seed(rank)

    os.makedirs(outdir, exist_ok=True)
    out = open(os.path.join(outdir, f"{name}.rank{rank}.jsonl"), "w")
    v = torch.cuda.nccl.version()
    env = dict(torch=torch.__version__, transformers=transformers.__version__, cuda=torch.version.cuda,
               gpu=torch.cuda.get_device_name(), total=total,
               nccl=".".join(map(str, v)) if isinstance(v, tuple) else str(v))

    def line(phase, **kw):
        out.write(json.dumps(dict(case=name, rank=rank, world=world, phase=phase, **kw)) + "\n")
        out.flush()

    line("init", context_bytes=context_bytes, nccl_init_bytes=nccl_init_bytes, env=env)

    def stats():
        s = torch.cuda.memory_stats()
        free, total = torch.cuda.mem_get_info()
        return dict(allocated_bytes=s.get("allocated_bytes.all.current", 0),
                    peak_allocated_bytes=s.get("allocated_bytes.all.peak", 0),
                    reserved_bytes=s.get("reserved_bytes.all.current", 0),
                    peak_reserved_bytes=s.get("reserved_bytes.all.peak", 0),
                    requested_bytes=s.get("requested_bytes.all.current", 0),
                    device_used_bytes=total - free)

    cur = [None]

    def begin(phase):
        cur[0] = phase
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def end():
        torch.cuda.synchronize()
        line(cur[0], **stats())

    # the allocator trace (every rank), for finding a missing rule without another GPU run
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python", context="alloc")
    cfg = dict(case["config"])
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    dt = dict(fp32=torch.float32, bf16=torch.bfloat16, fp16=torch.float16)
    wdt = dt[case.get("weights", "fp32")]
    b, seq = case["batch"], case.get("seq")
    task, mode = case.get("task", "causal"), case.get("mode", "train")
    adt = dt[case["autocast"]] if case.get("autocast") else None
    k = case.get("accumulation", 1)
    try:
        begin("load")
        auto = dict(causal=AutoModelForCausalLM, mlm=AutoModelForMaskedLM,
                    image=AutoModelForImageClassification)[task]
        model = auto.from_config(config, dtype=wdt, attn_implementation="sdpa")
        lc = case.get("lora")

        def peft(m):
            from peft import LoraConfig, get_peft_model
            return get_peft_model(m, LoraConfig(r=lc["r"], lora_alpha=lc.get("alpha", 8),
                                                target_modules=_targets(lc.get("targets")),
                                                lora_dropout=lc.get("dropout", 0.0), task_type="CAUSAL_LM"))

        if case["parallel"] == "fsdp":
            if lc:
                model = peft(model)
            base = model.get_base_model() if lc else model
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
            mesh = init_device_mesh("cuda", (world,))
            kw = dict(mesh=mesh)
            if case.get("param_dtype"):
                kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=dt[case["param_dtype"]],
                                                       reduce_dtype=torch.float32)
            if not case.get("reshard", True):
                kw["reshard_after_forward"] = False
            if case.get("cpu_offload"):
                kw["offload_policy"] = CPUOffloadPolicy()
            if config.model_type == "gpt2":
                layers = base.transformer.h
            elif hasattr(base, "model") and hasattr(base.model, "layers"):
                layers = base.model.layers
            else:
                from transformers.modeling_layers import GradientCheckpointingLayer
                layers = [m for m in base.modules() if isinstance(m, GradientCheckpointingLayer)]
            assert len(layers) == config.num_hidden_layers, len(layers)
            for layer in layers:
                fully_shard(layer, **kw)
            fully_shard(model, **kw)
            wrapped = model
        else:
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = model.cuda()
            if lc:
                model = peft(model)
            wrapped = DDP(model, device_ids=[local_rank], bucket_cap_mb=case.get("bucket_mb", 25),
                          gradient_as_bucket_view=case.get("grad_as_bucket_view", False),
                          find_unused_parameters=case.get("find_unused", False))
        if mode != "generate":
            opt = make_optimizer(torch, case, [p for p in model.parameters() if p.requires_grad])
        if task == "image":
            size = config.image_size
            pixel_values = torch.randn(b, config.num_channels, size, size, device="cuda", dtype=wdt)
            labels = torch.randint(0, config.num_labels, (b,), device="cuda")
            inputs = dict(pixel_values=pixel_values)
        else:
            input_ids = torch.randint(0, config.vocab_size, (b, seq), device="cuda")
            if mode != "generate":
                labels = input_ids.clone()
            inputs = dict(input_ids=input_ids)
        end()

        def autocast():
            return torch.autocast("cuda", dtype=adt) if adt is not None else contextlib.nullcontext()

        if mode == "generate":
            model.eval()
            calls = [0]

            def hook(module, args, output):
                if calls[0] == 0:
                    end()
                    begin("decode")
                calls[0] += 1

            handle = model.register_forward_hook(hook)
            begin("prefill")
            seqs = wrapped.module.generate(input_ids, max_new_tokens=case["new_tokens"],
                                           min_new_tokens=case["new_tokens"], do_sample=False)
            end()
            handle.remove()
            del seqs
            raise StopIteration
        if mode == "infer":
            wrapped.eval()
            ctx = dict(no_grad=torch.no_grad, enabled=contextlib.nullcontext)[case.get("grad", "no_grad")]
            for i in range(case.get("steps", 2)):
                begin(f"forward{i}")
                with ctx(), autocast():
                    logits = wrapped(**inputs).logits
                    del logits
                end()
            raise StopIteration
        if case.get("checkpointing"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if lc:
                model.enable_input_require_grads()
        wrapped.train()
        for i in range(case.get("steps", 3)):
            for m in range(k):
                sub = f".{m}" if k > 1 else ""
                sync = m == k - 1
                if case["parallel"] == "fsdp":
                    if k > 1:
                        model.set_requires_gradient_sync(sync)
                    no_sync = contextlib.nullcontext()
                else:
                    no_sync = contextlib.nullcontext() if sync else wrapped.no_sync()
                with no_sync:
                    begin(f"forward{i}{sub}")
                    with autocast():
                        loss = wrapped(**inputs, labels=labels).loss
                    end()
                    begin(f"backward{i}{sub}")
                    loss.backward()
                    del loss
                    end()
            begin(f"step{i}")
            opt.step()
            end()
            begin(f"zero_grad{i}")
            opt.zero_grad(set_to_none=True)
            end()
    except StopIteration:  # the inference passes are done
        pass
    except torch.OutOfMemoryError as e:
        line("error", kind="oom", at=cur[0], message=str(e).splitlines()[0], **stats())
    out.close()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = []
    for e in snap["device_traces"][local_rank]:
        fr = [f"{os.path.basename(f['filename'])}:{f['line']}:{f['name']}" for f in e.get("frames", [])
              if "/torch/" not in f["filename"] or "/fsdp/" in f["filename"] or "/parallel/" in f["filename"]
              or "/torch/optim/" in f["filename"] or "/torch/utils/checkpoint" in f["filename"]][:4]
        trace.append([e["action"], e.get("addr", e.get("device_free", 0)), e["size"], e.get("stream", 0), fr])
    with open(os.path.join(outdir, f"{name}.rank{rank}.trace.json"), "w") as f:
        json.dump(trace, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Run the `vramscope estimate` workload on a real GPU and record its figures per phase.

    python3 hf_cases.py CASES.json NAME OUTDIR          # one case, one fresh process
    python3 hf_cases.py CASES.json NAME OUTDIR --limit-bytes N --batch B --quiet
                                                        # one try of plan's bisection: exit 0 if every
                                                        # step completes, 3 on out-of-memory

CASES.json (validation/hf_cases.json) lists workloads. Each has `name`, `config` (fields of a
Hugging Face config; `model_type` picks the family; unset fields take the family's defaults),
`task` (causal | mlm | image), `mode` (train | infer), `batch`, `seq` (or `image_size` from the
config), `weights` (fp32 | bf16 | fp16), `autocast` (null | bf16 | fp16), `optimizer`
(adamw | adam | sgd), `momentum`, `lr`, `checkpointing` (bool), `checkpointing_every` (k, default
1), `steps`, and optionally `alloc_conf` (PYTORCH_CUDA_ALLOC_CONF).

The workload is exactly the one issue #5 names:
- load: `AutoModelFor*.from_config(config, dtype=W, attn_implementation="sdpa").cuda()`, the
  optimizer (no memory until its first step), then the inputs: `input_ids` (batch, seq) int64 from
  `torch.randint` on the GPU and `labels = input_ids.clone()` (images: `pixel_values` (batch, 3, H, W)
  from `torch.randn` in the weight dtype, `labels` (batch,) int64);
- train: `model.train()` (optionally `gradient_checkpointing_enable(...use_reentrant=False)`), then per
  step i the phases `forward{i}`: `loss = model(**inputs).loss` (under `torch.autocast` if asked),
  `backward{i}`: `loss.backward(); del loss`, `step{i}`: `opt.step()`, `zero_grad{i}`:
  `opt.zero_grad(set_to_none=True)`;
- infer: `model.eval()`, then per pass `forward{i}`: under `torch.no_grad()`,
  `logits = model(**inputs).logits; del logits` (the input without labels); a case's `grad`
  (`no_grad` by default, `inference_mode`, or `enabled`: no context, the graph recorded) picks
  the context.
Each phase starts with `torch.cuda.reset_peak_memory_stats()` and ends with a synchronize; its
figures are memory_allocated, max_memory_allocated, memory_reserved, the reserved peak and
requested bytes at its end.

Outputs OUTDIR/NAME.json: {name, env, config (the full config.to_dict()), phases: [...], error?}
and OUTDIR/NAME.trace.json: the allocator trace from the start of `load`, compactly
[action, addr, size, stream, innermost python frames] per entry.
"""
import contextlib
import gc
import json
import os
import sys


def stats(torch):
    s = torch.cuda.memory_stats()
    out = dict(allocated_bytes=s.get("allocated_bytes.all.current", 0),
               peak_allocated_bytes=s.get("allocated_bytes.all.peak", 0),
               reserved_bytes=s.get("reserved_bytes.all.current", 0),
               peak_reserved_bytes=s.get("reserved_bytes.all.peak", 0),
               requested_bytes=s.get("requested_bytes.all.current", 0))
    if os.environ.get("DEVICE_USED"):
        # the whole device's used bytes (cudaMemGetInfo): the CUDA context, the driver's own
        # allocations and the allocator's segments, so only meaningful with this process alone
        # on the GPU
        free, total = torch.cuda.mem_get_info()
        out["device_used_bytes"] = total - free
    return out


def checkpoint(label=""):
    """Under `validation/va_maps.py` (VA_MAPS set): stop, so that the parent reads this process's
    /proc/PID/maps from outside (reading it here would allocate host memory, which moves later
    mappings), and go on when it sends SIGCONT. With VA_MAPS_FD the label (an op's name) goes to
    the parent first. Under `validation/malloc_log.c` (MALLOC_LOG set, the library preloaded) the
    label is written to its log first. A no-op otherwise."""
    if os.environ.get("MALLOC_LOG"):
        import ctypes
        ctypes.CDLL(None).vramscope_mark(label.encode())
    if os.environ.get("VA_MAPS"):
        import signal
        import threading
        fd = os.environ.get("VA_MAPS_FD")
        if fd:
            os.write(int(fd), (label + "\n").encode())
        # to this thread: sent to the process, a stop raised on the autograd thread can be taken
        # by another thread while this one runs on, and merge with its next (stops were lost)
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


def op_stops():
    """VA_MAPS_OPS set: a dispatch mode that stops after every aten op (see `checkpoint`), from
    the inputs to the end of the first forward and backward (inference: the first pass); else
    None."""
    if not ((os.environ.get("VA_MAPS") or os.environ.get("MALLOC_LOG")) and os.environ.get("VA_MAPS_OPS")):
        return None
    from torch.utils._python_dispatch import TorchDispatchMode

    class Stops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            checkpoint(str(func))
            return out
    return Stops()


def kernel_names(outdir, name):
    """KERNELS set: a profiler over the first forward, which writes OUTDIR/NAME.kernels.json, the
    aten ops that launched kernels, in order, with the kernels' names: [[op, [kernel, ...]], ...]
    (which cuBLAS kernels a workload's matmuls use: each loads a host image of its own, see
    fixtures/va_maps/README.md); else None. Its figures are not the workload's."""
    if not os.environ.get("KERNELS"):
        return None
    import torch

    @contextlib.contextmanager
    def prof():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as p:
            yield
            torch.cuda.synchronize()
        out = [[e.name, [k.name for k in e.kernels]] for e in sorted(p.events(), key=lambda e: e.time_range.start)
               if e.kernels]
        os.makedirs(outdir, exist_ok=True)
        with open(os.path.join(outdir, name + ".kernels.json"), "w") as f:
            json.dump(out, f)
    return prof()


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("cases"); ap.add_argument("name"); ap.add_argument("outdir")
    ap.add_argument("--batch", type=int); ap.add_argument("--limit-bytes", type=int)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    name, outdir, quiet = a.name, a.outdir, a.quiet
    with open(a.cases) as f:
        case = next(c for c in json.load(f) if c["name"] == name)
    if a.batch is not None:
        case["batch"] = a.batch
    if case.get("alloc_conf"):
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = case["alloc_conf"]
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageClassification, AutoModelForMaskedLM

    torch.manual_seed(0)
    torch.cuda.init()
    checkpoint("init")
    total = torch.cuda.get_device_properties(0).total_memory
    if a.limit_bytes is not None:
        # plan's bisection: exactly `set_per_process_memory_fraction(F)`
        torch.cuda.set_per_process_memory_fraction(a.limit_bytes / total)
    env = dict(torch=torch.__version__, transformers=transformers.__version__, cuda=torch.version.cuda,
               gpu=torch.cuda.get_device_name(), cap=list(torch.cuda.get_device_capability()), total=total)
    if not quiet:
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python", context="alloc")

    cfg = dict(case["config"])
    model_type = cfg.pop("model_type")
    config = AutoConfig.for_model(model_type, **cfg)
    wdt = dict(fp32=torch.float32, bf16=torch.bfloat16, fp16=torch.float16)[case.get("weights", "fp32")]
    adt = case.get("autocast")
    adt = dict(bf16=torch.bfloat16, fp16=torch.float16)[adt] if adt else None
    task, mode = case["task"], case["mode"]
    b = case["batch"]
    phases = []
    result = dict(name=name, env=env, config=config.to_dict(), phases=phases)
    cur = [None]

    stops = [None]

    def begin(phase):
        if phase not in ("forward0", "backward0") and stops[0] is not None:
            stops[0].__exit__(None, None, None)
            stops[0] = None
        cur[0] = phase
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def end():
        torch.cuda.synchronize()
        phases.append(dict(name=cur[0], **stats(torch)))
        checkpoint("end " + cur[0])

    try:
        begin("load")
        auto = dict(causal=AutoModelForCausalLM, mlm=AutoModelForMaskedLM, image=AutoModelForImageClassification)[task]
        model = auto.from_config(config, dtype=wdt, attn_implementation="sdpa")
        checkpoint("cpu_model")
        model = model.cuda()  # Module.cuda returns the module itself
        checkpoint("cuda")
        params = model.parameters()
        opt_name = case.get("optimizer", "adamw")
        lr = case.get("lr", 1e-4)
        if opt_name == "adamw":
            opt = torch.optim.AdamW(params, lr=lr)
        elif opt_name == "adam":
            opt = torch.optim.Adam(params, lr=lr)
        else:
            opt = torch.optim.SGD(params, lr=lr, momentum=case.get("momentum", 0.0))
        stops[0] = op_stops()
        if stops[0] is not None:
            stops[0].__enter__()
        if task == "image":
            size = config.image_size
            pixel_values = torch.randn(b, config.num_channels, size, size, device="cuda", dtype=wdt)
            labels = torch.randint(0, config.num_labels, (b,), device="cuda")
            inputs = dict(pixel_values=pixel_values)
        else:
            input_ids = torch.randint(0, config.vocab_size, (b, case["seq"]), device="cuda")
            labels = input_ids.clone()
            inputs = dict(input_ids=input_ids)
        end()
        if mode == "train":
            if case.get("checkpointing"):
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False},
                                                    every_n_layers=case.get("checkpointing_every", 1))
            model.train()
            for i in range(case.get("steps", 3)):
                begin(f"forward{i}")
                kn = kernel_names(outdir, name) if i == 0 else None
                if kn is not None:
                    kn.__enter__()
                if adt is not None:
                    with torch.autocast("cuda", dtype=adt):
                        loss = model(**inputs, labels=labels).loss
                else:
                    loss = model(**inputs, labels=labels).loss
                if kn is not None:
                    kn.__exit__(None, None, None)
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
        else:
            model.eval()
            for i in range(case.get("steps", 2)):
                begin(f"forward{i}")
                grad = case.get("grad", "no_grad")
                ctx = dict(no_grad=torch.no_grad, inference_mode=torch.inference_mode,
                           enabled=contextlib.nullcontext)[grad]
                kn = kernel_names(outdir, name) if i == 0 else None
                with ctx(), (kn if kn is not None else contextlib.nullcontext()):
                    if adt is not None:
                        with torch.autocast("cuda", dtype=adt):
                            logits = model(**inputs).logits
                    else:
                        logits = model(**inputs).logits
                    del logits
                end()
    except torch.OutOfMemoryError as e:
        result["error"] = dict(kind="oom", phase=cur[0], message=str(e).splitlines()[0], **stats(torch))
    except RuntimeError as e:
        # a new cuBLAS handle (the autograd thread's first matmul) takes device memory through the
        # driver, not the caching allocator, which does not release its cache for it: on a full
        # card `cublasCreate` fails. The workload ran out of memory all the same.
        # cuDNN likewise: on a full card (ViT's patch embedding at its largest batches) its
        # backward failed with CUDNN_STATUS_INTERNAL_ERROR, between a batch that completed and
        # one the allocator ran out at, with 2.2 MiB of the device free. Counted as not
        # completing (`cudnn_internal`) only with the device that full (under 64 MiB free):
        # any other cuDNN error is a failure of the try.
        kinds = {"CUBLAS_STATUS_ALLOC_FAILED": "cublas_alloc",
                 "CUDNN_STATUS_INTERNAL_ERROR": "cudnn_internal"}
        kind = next((k for m, k in kinds.items() if m in str(e)), None)
        if kind is None:
            raise
        try:
            at = stats(torch)
            free, _ = torch.cuda.mem_get_info()
        except RuntimeError:  # a context the error left unusable: no figures
            at, free = {}, None
        if kind == "cudnn_internal" and (free is None or free >= 64 << 20):
            raise
        at["device_free_bytes"] = free
        result["error"] = dict(kind=kind, phase=cur[0], message=str(e).splitlines()[0], **at)
    if quiet:
        print(json.dumps(dict(name=name, batch=b, ok="error" not in result,
                              error=result.get("error"), phases=phases)))
        sys.exit(3 if "error" in result else 0)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = []
    for e in snap["device_traces"][0]:
        fr = [f"{os.path.basename(f['filename'])}:{f['line']}:{f['name']}" for f in e.get("frames", [])
              if "/torch/" not in f["filename"] or "/torch/utils/checkpoint" in f["filename"]
              or "/torch/optim/" in f["filename"] or "/torch/nn/" in f["filename"]][:4]
        # an `oom` entry carries the device's free bytes where others carry an address
        trace.append([e["action"], e.get("addr", e.get("device_free", 0)), e["size"], e.get("stream", 0), fr])
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, name + ".trace.json"), "w") as f:
        json.dump(trace, f)
    with open(os.path.join(outdir, name + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    gc.collect()


if __name__ == "__main__":
    main()

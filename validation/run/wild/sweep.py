"""pytorch/examples, unmodified, under the twin and on a GPU (validation/run/wild/README.md):

    python validation/run/wild/sweep.py twin CHECKOUT OUTDIR [NAME ...]  # vramscope run --gpu h200
    python validation/run/wild/sweep.py gpu  CHECKOUT OUTDIR [NAME ...]  # record.py, on the GPU

Both write fake data into CHECKOUT first (fake_data.py; TORCH_HOME=CHECKOUT/.torch_home), then run
each example of EXAMPLES from its own folder, in order (word_language_model's generate.py reads the
model.pt its main.py run before it saved), one process each, and write OUTDIR/NAME.out, NAME.err and
OUTDIR/twin.jsonl (run_answers.py's lines) or OUTDIR/gpu.jsonl (record.py's lines), each line's
"script" the example's NAME, for validation/run_compare.py OUTDIR/gpu.jsonl OUTDIR/twin.jsonl;
OUTDIR/summary.jsonl: exit code and seconds per example. GPU=h100 selects the twin's GPU.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from run_answers import answer  # noqa: E402

# (NAME, folder in the checkout, script and arguments, ranks): small arguments, the accelerator on.
# Ranks > 1: torchrun's layout, the twin under --nproc N (rank 0), the GPU under torchrun (rank 0's
# lines kept); those need that many GPUs. Order matters where a run reads what one before it saved
# (word_language_model's generate.py reads model.pt).
EXAMPLES = [
    ("mnist", "mnist", "main.py --epochs 1 --dry-run", 1),
    ("mnist_rnn", "mnist_rnn", "main.py --epochs 1 --dry-run --accel", 1),
    ("mnist_hogwild", "mnist_hogwild", "main.py --epochs 1 --dry-run --cuda", 1),
    ("mnist_forward_forward", "mnist_forward_forward", "main.py --epochs 1", 1),
    ("siamese_network", "siamese_network", "main.py --epochs 1 --dry-run", 1),
    ("vae", "vae", "main.py --epochs 1", 1),
    ("dcgan", "dcgan", "main.py --dataset fake --accel --dry-run", 1),
    ("wlm_lstm", "word_language_model", "main.py --epochs 1 --dry-run --accel", 1),
    ("wlm_lstm_generate", "word_language_model", "generate.py --accel", 1),
    ("wlm_gru", "word_language_model", "main.py --model GRU --epochs 1 --dry-run --accel", 1),
    ("wlm_rnn_tanh", "word_language_model", "main.py --model RNN_TANH --epochs 1 --dry-run --accel", 1),
    ("wlm_rnn_relu", "word_language_model", "main.py --model RNN_RELU --epochs 1 --dry-run --accel", 1),
    ("wlm_transformer", "word_language_model", "main.py --model Transformer --epochs 1 --dry-run --accel", 1),
    ("wlm_transformer_generate", "word_language_model", "generate.py --accel", 1),
    *(
        (f"imagenet_{a}", "imagenet", f"main.py -a {a} --epochs 1 -b 8 -j 1 fake", 1)
        for a in (
            "resnet18",
            "resnet50",
            "mobilenet_v3_large",
            "efficientnet_b0",
            "vit_b_16",
            "convnext_tiny",
            "swin_t",
            "densenet121",
            "vgg11_bn",
            "alexnet",
        )
    ),
    ("imagenet_resnet18_gpu0", "imagenet", "main.py -a resnet18 --epochs 1 -b 8 -j 1 --gpu 0 fake", 1),
    ("imagenet_resnet50_evaluate", "imagenet", "main.py -a resnet50 -e -b 8 -j 1 fake", 1),
    # its README's multiprocessing-distributed form: mp.spawn of one DDP rank per GPU (one GPU here)
    (
        "imagenet_resnet18_ddp_spawn",
        "imagenet",
        "main.py -a resnet18 --epochs 1 -b 8 -j 1 --dist-url tcp://127.0.0.1:23457 --dist-backend nccl"
        " --multiprocessing-distributed --world-size 1 --rank 0 fake",
        1,
    ),
    (
        "fast_neural_style_eval",
        "fast_neural_style",
        "neural_style/neural_style.py eval --content-image images/content-images/amber.jpg"
        " --model fake_models/random.pth --output-image wild_out.jpg --accel",
        1,
    ),
    (
        "fast_neural_style_train",
        "fast_neural_style",
        "neural_style/neural_style.py train --dataset fake_coco --save-model-dir wild_models --epochs 1"
        " --batch-size 4 --accel",
        1,
    ),
    ("ddp_series_single_gpu", "distributed/ddp-tutorial-series", "single_gpu.py 2 1", 1),
    ("ddp_series_multigpu_spawn", "distributed/ddp-tutorial-series", "multigpu.py 2 1", 1),
    ("ddp_series_multigpu_torchrun", "distributed/ddp-tutorial-series", "multigpu_torchrun.py 2 1", 2),
    ("ddp_example", "distributed/ddp", "example.py", 2),
    ("fsdp2_example", "distributed/FSDP2", "example.py", 2),
    ("fsdp2_example_mixed_precision", "distributed/FSDP2", "example.py --mixed-precision", 2),
    ("fsdp2_example_explicit_prefetching", "distributed/FSDP2", "example.py --explicit-prefetching", 2),
    # the second loads what the first saved (torch.distributed.checkpoint's state_dict API)
    ("fsdp2_example_dcp_api", "distributed/FSDP2", "example.py --dcp-api", 2),
    ("fsdp2_example_dcp_api_resume", "distributed/FSDP2", "example.py --dcp-api", 2),
    ("tensor_parallel", "distributed/tensor_parallelism", "tensor_parallel_example.py", 2),
    ("sequence_parallel", "distributed/tensor_parallelism", "sequence_parallel_example.py", 2),
    ("fsdp_tp", "distributed/tensor_parallelism", "fsdp_tp_example.py", 4),
]

# what an example saved and a later run would load instead of starting afresh (FSDP2's
# Checkpointer, the DDP series' snapshot): removed before every example but a "_resume" one
CLEAN = ("distributed/FSDP2/checkpoints", "distributed/ddp-tutorial-series/snapshot.pt")


def env_json():
    import platform
    from importlib import metadata

    env = {"python": sys.version.split()[0], "platform": platform.platform()}
    for p in ("torch", "torchvision", "numpy", "pillow"):
        try:
            env[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            env[p] = "missing"
    return env


def gpu_run(checkout, folder, argv, name, log, timeout, ranks):
    """record.py's lines for one example, as record.sh runs a script (HF offline, unbuffered);
    ranks > 1 under `torchrun --standalone`, each rank writing LOG.rankR.jsonl, rank 0's kept."""
    record = os.path.join(os.path.dirname(HERE), "record.py")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF",)}
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out = log + (".rank0.jsonl" if ranks > 1 else ".jsonl")
    for r in range(max(ranks, 1)):
        for f in (log + f".rank{r}.jsonl", log + ".jsonl"):
            if os.path.exists(f):
                os.remove(f)
    if ranks > 1:
        inner = f"OUT_JSONL={shlex.quote(log)}.rank$LOCAL_RANK.jsonl exec {shlex.quote(sys.executable)} "
        inner += " ".join(shlex.quote(a) for a in (record, *argv))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
        cmd += ["--no-python", "bash", "-c", inner]
    else:
        # one GPU, as the twin's (an example that spawns a rank per visible GPU spawns one)
        env.setdefault("CUDA_VISIBLE_DEVICES", "0")
        env["OUT_JSONL"] = out
        cmd = [sys.executable, record, *argv]
    with open(log + ".out", "w") as so, open(log + ".err", "w") as se:
        try:
            rc = subprocess.run(
                cmd, cwd=os.path.join(checkout, folder), stdout=so, stderr=se, env=env, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    lines = []
    if os.path.exists(out):
        for line in open(out):
            rec = json.loads(line)
            rec["script"] = name
            lines.append(rec)
    return rc, lines


def write_result(out, summary, row, lines, t0):
    """One run's phase lines to `out`, then its summary row (with the run's seconds since `t0`) to
    `summary` and stdout; both files flushed, so a sweep cut short keeps what it ran."""
    for rec in lines:
        out.write(json.dumps(rec) + "\n")
    row = {**row, "seconds": round(time.time() - t0, 1)}
    summary.write(json.dumps(row) + "\n")
    summary.flush()
    out.flush()
    print(json.dumps(row), flush=True)


def run_entries(mode, outdir, entries, ranked=True):
    """Each entry of `entries`, (NAME, BASE, FOLDER, ARGV, RANKS[, RC]), run from BASE/FOLDER under the
    twin (`answer`, with `--nproc RANKS` where RANKS > 1) or on the GPU (`gpu_run`, TIMEOUT seconds at
    most, default 600; with `ranked`, "skipped" where RANKS exceeds the GPUs counted before the first
    entry), or not at all where RC is given (its row's rc, e.g. tutorials.py's "sha256 mismatch"). Its
    lines go to OUTDIR/MODE.jsonl and its row, {"script", "mode", "rc"} (and "ranks" with `ranked`), to
    OUTDIR/summary.jsonl (`write_result`), both opened for appending. `entries` may be a generator: what
    it does before and after a yield (a folder cleaned, the environment set and put back) frames that
    entry's run, whose seconds start once it has yielded."""
    gpus = None
    if mode == "gpu" and ranked:
        import torch

        gpus = torch.cuda.device_count()
    with (
        open(os.path.join(outdir, f"{mode}.jsonl"), "a") as out,
        open(os.path.join(outdir, "summary.jsonl"), "a") as summary,
    ):
        for name, base, folder, argv, ranks, *given in entries:
            log = os.path.join(outdir, name)
            t0 = time.time()
            lines = []
            if given:
                (rc,) = given
            elif mode == "twin":
                options = ("--nproc", str(ranks)) if ranks > 1 else ()
                lines = answer(
                    argv[0], argv[1:], cwd=os.path.join(base, folder), name=name, log=log, options=options
                )
                rc = lines[-1]["exit"]
            elif ranked and ranks > gpus:
                rc = f"skipped: needs {ranks} GPUs"
            else:
                timeout = int(os.environ.get("TIMEOUT", "600"))
                rc, lines = gpu_run(base, folder, argv, name, log, timeout, ranks)
            row = {"script": name, "mode": mode, "rc": rc, **({"ranks": ranks} if ranked else {})}
            write_result(out, summary, row, lines, t0)


def table_rows(text):
    """The rows of programs.py's and lightning.py's tables: (FIELDS, COMMAND) for each line of
    space-separated fields, COMMAND the indented lines below it joined by single spaces."""
    rows = []
    for line in text.strip("\n").splitlines():
        if line.startswith(" "):
            rows[-1][1] += " " + line.strip()
        else:
            rows.append([line.split(), ""])
    return [(fields, command.strip()) for fields, command in rows]


def start(fake_data, torch_home=True):
    """The command line of tutorials.py, programs.py and lightning.py: `data ROOT` writes the fake data
    (`fake_data(ROOT)`) and gives None; `twin|gpu ROOT OUTDIR [NAME ...]` makes OUTDIR, sets GPU (h200
    unless set) and, with `torch_home`, TORCH_HOME=ROOT/.torch_home, writes the fake data unless
    NO_FAKE_DATA is set, and gives (MODE, ROOT, OUTDIR, NAMEs)."""
    mode, root = sys.argv[1], os.path.abspath(sys.argv[2])
    if mode == "data":
        fake_data(root)
        return None
    outdir = os.path.abspath(sys.argv[3])
    names = sys.argv[4:]
    os.makedirs(outdir, exist_ok=True)
    os.environ.setdefault("GPU", "h200")
    if torch_home:
        os.environ["TORCH_HOME"] = os.path.join(root, ".torch_home")
    if not os.environ.get("NO_FAKE_DATA"):
        fake_data(root)
    return mode, root, outdir, names


def main():
    mode, checkout, outdir = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    names = sys.argv[4:]
    os.makedirs(outdir, exist_ok=True)
    os.environ["TORCH_HOME"] = os.path.join(checkout, ".torch_home")
    os.environ.setdefault("GPU", "h200")
    if not os.environ.get("NO_FAKE_DATA"):
        subprocess.run(
            [sys.executable, os.path.join(HERE, "fake_data.py"), checkout, os.environ["TORCH_HOME"]],
            check=True,
        )
    with open(os.path.join(outdir, f"env_{mode}.json"), "w") as f:
        json.dump(env_json(), f)
    todo = [e for e in EXAMPLES if not names or e[0] in names]

    def entries():
        for name, folder, cmd, ranks in todo:
            for c in () if name.endswith("_resume") else (os.path.join(checkout, c) for c in CLEAN):
                if os.path.isdir(c):
                    shutil.rmtree(c)
                elif os.path.exists(c):
                    os.remove(c)
            yield name, checkout, folder, shlex.split(cmd), ranks

    run_entries(mode, outdir, entries())


if __name__ == "__main__":
    main()

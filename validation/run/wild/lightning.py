"""PyTorch Lightning's own example programs, unmodified, under the twin and on a GPU: the fifth section
of validation/run/wild/README.md.

    python validation/run/wild/lightning.py data ROOT                     # fake data into the checkout
    python validation/run/wild/lightning.py twin ROOT OUTDIR [NAME ...]    # vramscope run --gpu h200 --json
    python validation/run/wild/lightning.py gpu  ROOT OUTDIR [NAME ...]    # record.py, on the GPU

ROOT is the `examples/` folder of github:Lightning-AI/pytorch-lightning at COMMIT, extracted under
ROOT/examples (`git archive COMMIT examples`), with the `lightning` package of the same release
(2.6.5) importable (README: the wheels). twin and gpu write the fake data first (as `data`;
NO_FAKE_DATA=1 skips it), then run each program of PROGRAMS in order, one process each, from its
folder, with its environment variables (Fabric's programs read `fabric run`'s LT_* variables),
reusing sweep.py's runner: OUTDIR/NAME.out, NAME.err, OUTDIR/twin.jsonl or gpu.jsonl,
OUTDIR/summary.jsonl. The folder's `lightning_logs/` (the checkpoints `ckpt_path="best"` reads) is
removed before each program. None of the programs calls reset_peak_memory_stats: one "end" line each.
"""

import json
import os
import shlex
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # sweep.py puts validation/ (run_answers) on it too
from sweep import env_json, run_entries, start, table_rows  # noqa: E402

# The release swept (session 57): tag 2.6.5, "Prepare Patch Release 2.6.5 (#21745)", 2026-05-27.
REPO, COMMIT, VERSION = "Lightning-AI/pytorch-lightning", "be98784a1a03581b7051a355ae1084fd352d7cea", "2.6.5"

# run_pl_examples.sh's arguments, with the GPU asked for as the basics' README does
_PL = (
    "--data.batch_size=32 --trainer.max_epochs=1 --trainer.limit_train_batches=2"
    " --trainer.limit_val_batches=2 --trainer.limit_test_batches=2 --trainer.limit_predict_batches=2"
    " --optimizer=Adam --trainer.accelerator gpu --trainer.devices 1"
)
# `fabric run --accelerator=cuda --devices=1 [--precision=P]` sets these before it starts the script
_FABRIC = "LT_CLI_USED=1,LT_ACCELERATOR=cuda,LT_DEVICES=1,LT_NUM_NODES=1"

# Each program: a line "NAME FOLDER ENV RANKS" (FOLDER under ROOT/examples, where it runs; ENV
# comma-separated K=V set for it, or -; RANKS 1, or N for the twin's `--nproc N` and torchrun's rank
# 0 as sweep.py runs them), then its script and arguments on the indented lines below.
_TABLE = f"""
pl_autoencoder pytorch/basics - 1
    autoencoder.py {_PL}
pl_autoencoder_bf16_mixed pytorch/basics - 1
    autoencoder.py {_PL} --trainer.precision bf16-mixed
pl_autoencoder_16_mixed_accumulate pytorch/basics - 1
    autoencoder.py {_PL} --trainer.precision 16-mixed --trainer.limit_train_batches=4
    --trainer.accumulate_grad_batches 2
pl_autoencoder_device_stats_monitor pytorch/basics - 1
    autoencoder.py {_PL} --trainer.callbacks+=DeviceStatsMonitor
pl_autoencoder_pytorch_profiler pytorch/basics - 1
    autoencoder.py {_PL} --trainer.profiler pytorch
pl_autoencoder_fsdp pytorch/basics - 1
    autoencoder.py {_PL} --trainer.strategy fsdp
pl_backbone_image_classifier pytorch/basics - 1
    backbone_image_classifier.py {_PL}
pl_backbone_image_classifier_bf16_true pytorch/basics - 1
    backbone_image_classifier.py {_PL} --trainer.precision bf16-true
pl_backbone_image_classifier_16_mixed pytorch/basics - 1
    backbone_image_classifier.py {_PL} --trainer.precision 16-mixed
pl_bug_report_model pytorch/bug_report - 1
    bug_report_model.py
pl_imagenet_resnet18 pytorch/domain_templates - 1
    imagenet.py fit --model.data_path fake_imagenet --model.batch_size 16 --model.workers 2
    --trainer.max_epochs 1 --trainer.limit_train_batches 2 --trainer.limit_val_batches 2
pl_imagenet_resnet50_16_mixed pytorch/domain_templates - 1
    imagenet.py fit --model.data_path fake_imagenet --model.arch resnet50 --model.batch_size 16
    --model.workers 2 --trainer.max_epochs 1 --trainer.limit_train_batches 2
    --trainer.limit_val_batches 2 --trainer.precision 16-mixed
pl_imagenet_resnet18_validate pytorch/domain_templates - 1
    imagenet.py validate --model.data_path fake_imagenet --model.batch_size 16 --model.workers 2
    --trainer.limit_val_batches 2
fabric_image_classifier fabric/image_classifier {_FABRIC} 1
    train_fabric.py --epochs 1 --dry-run
fabric_image_classifier_bf16_mixed fabric/image_classifier {_FABRIC},LT_PRECISION=bf16-mixed 1
    train_fabric.py --epochs 1 --dry-run
fabric_image_classifier_16_mixed fabric/image_classifier {_FABRIC},LT_PRECISION=16-mixed 1
    train_fabric.py --epochs 1 --dry-run
fabric_image_classifier_torch fabric/image_classifier - 1
    train_torch.py --epochs 1 --dry-run
pl_autoencoder_ddp2 pytorch/basics - 2
    autoencoder.py --trainer.devices 2 --trainer.strategy ddp --trainer.max_epochs=1
    --trainer.limit_train_batches=1 --trainer.limit_val_batches=1 --trainer.limit_test_batches=1
    --trainer.accelerator gpu
pl_transformer pytorch/basics - 1
    transformer.py
pl_computer_vision_fine_tuning pytorch/domain_templates - 1
    computer_vision_fine_tuning.py fit --trainer.max_epochs 1 --trainer.limit_train_batches 2
    --trainer.limit_val_batches 2 --data.batch_size 8 --data.num_workers 2
pl_tensor_parallel pytorch/tensor_parallel - 4
    train.py
fabric_language_model fabric/language_model {_FABRIC} 1
    train.py
fabric_tensor_parallel fabric/tensor_parallel - 4
    train.py
"""


def _programs():
    out = []
    for (name, folder, env, ranks), cmd in table_rows(_TABLE):
        env = {} if env == "-" else dict(kv.split("=", 1) for kv in env.split(","))
        out.append((name, folder, env, int(ranks), cmd))
    return out


#: (NAME, FOLDER under ROOT/examples, environment, RANKS, script and arguments)
PROGRAMS = _programs()


def fake_data(root):
    """Deterministic fake inputs (numpy seed 0) where each program looks for them; only sizes matter."""
    import numpy as np
    from fake_data import jpegs, mnist

    rng = np.random.default_rng(0)
    ex = os.path.join(root, "examples")
    # MNIST's idx files (60,000 / 10,000 images), as torchvision.datasets.MNIST finds them without a
    # download: the basics' DATASETS_PATH (examples/Datasets), Fabric's (examples/../Datasets), the
    # `./data` that lightning.pytorch.demos.mnist_datamodule.MNIST first probes from the working folder.
    first = os.path.join(ex, "Datasets")
    mnist(first, rng)
    for d in (
        os.path.join(root, "Datasets"),
        os.path.join(ex, "pytorch", "basics", "data"),
    ):
        shutil.rmtree(os.path.join(d, "MNIST"), ignore_errors=True)
        shutil.copytree(os.path.join(first, "MNIST"), os.path.join(d, "MNIST"))
    # imagenet.py's data_path: an ImageFolder of 2 classes x 16 RGB JPEGs 320 x 280 per split
    for split in ("train", "val"):
        for c in range(2):
            jpegs(
                os.path.join(ex, "pytorch", "domain_templates", "fake_imagenet", split, f"c{c:02d}"), 16, rng
            )
    # lightning.pytorch.demos.WikiText2's `./data/wikitext-2.txt` (transformer.py, language_model):
    # 4,040 blocks of 35 tokens (random_split takes 4,000 for validation and test: 40 train), words
    # drawn from wikitext-2's 33,278, 20 to a line
    words = rng.integers(0, 33_278, size=4_040 * 35 + 1)
    text = "\n".join(" ".join(f"w{w}" for w in words[i : i + 20]) for i in range(0, len(words), 20))
    for d in ("pytorch/basics/data", "fabric/language_model/data"):
        os.makedirs(os.path.join(ex, d), exist_ok=True)
        with open(os.path.join(ex, d, "wikitext-2.txt"), "w") as f:
            f.write(text + "\n")
    # computer_vision_fine_tuning.py: `data/cats_and_dogs_filtered.zip` (download_url skips a file
    # that exists when no md5 is given; extract_archive removes it after extracting) of
    # {train,validation}/{cats,dogs}/*.JPEG, 16 each; resnet50's DEFAULT weights
    # (ResNet50_Weights.IMAGENET1K_V2) as a fresh state_dict in TORCH_HOME (checked by hash only
    # when downloaded)
    dt = os.path.join(ex, "pytorch", "domain_templates")
    staging = os.path.join(dt, "data", "staging")
    shutil.rmtree(os.path.join(dt, "data"), ignore_errors=True)
    for split in ("train", "validation"):
        for c in ("cats", "dogs"):
            jpegs(os.path.join(staging, "cats_and_dogs_filtered", split, c), 16, rng)
    shutil.make_archive(os.path.join(dt, "data", "cats_and_dogs_filtered"), "zip", staging)
    shutil.rmtree(staging)
    import torch
    import torchvision

    torch.manual_seed(0)
    hub = os.path.join(root, ".torch_home", "hub", "checkpoints")
    os.makedirs(hub, exist_ok=True)
    weights = os.path.join(hub, "resnet50-11ad3fa6.pth")
    if not os.path.exists(weights):
        torch.save(torchvision.models.resnet50().state_dict(), weights)
    print("fake data written under", root)


def main():
    args = start(fake_data)
    if args is None:
        return
    mode, root, outdir, names = args
    todo = [p for p in PROGRAMS if not names or p[0] in names]
    env = env_json()
    from importlib import metadata

    for p in ("lightning", "torchmetrics", "lightning-utilities", "jsonargparse"):
        try:
            env[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            env[p] = "missing"
    with open(os.path.join(outdir, f"env_lightning_{mode}.json"), "w") as f:
        json.dump(env, f)

    def entries():
        for name, folder, extra_env, ranks, cmd in todo:
            for d in ("lightning_logs", "checkpoints"):
                shutil.rmtree(os.path.join(root, "examples", folder, d), ignore_errors=True)
            saved = {k: os.environ.get(k) for k in extra_env}
            os.environ.update(extra_env)
            try:
                yield name, os.path.join(root, "examples"), folder, shlex.split(cmd), ranks
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v

    run_entries(mode, outdir, entries())


if __name__ == "__main__":
    main()

"""PyTorch's tutorials (pytorch/tutorials), unmodified, under the twin and on a GPU: the third section
of validation/run/wild/README.md.

    python validation/run/wild/tutorials.py data ROOT                     # fake data into ROOT
    python validation/run/wild/tutorials.py twin ROOT OUTDIR [NAME ...]    # vramscope run --gpu h200 --json
    python validation/run/wild/tutorials.py gpu  ROOT OUTDIR [NAME ...]    # record.py, on the GPU

ROOT holds each tutorial of TUTORIALS at its path in the repository (ROOT/beginner_source/basics/
quickstart_tutorial.py, ...), the text the file index stores for it at the commit named (the
repository, 5.3 GB, is over the snapshot limit: no checkout); its sha256 is checked before it runs
(summary `rc` "sha256 mismatch" otherwise). twin and gpu write the fake data first (as `data`;
NO_FAKE_DATA=1 skips it), then run each tutorial in order, one process each, from its folder (as
sphinx-gallery runs it), TORCH_HOME=ROOT/.torch_home, reusing sweep.py's runner: OUTDIR/NAME.out,
NAME.err, OUTDIR/twin.jsonl or gpu.jsonl, OUTDIR/summary.jsonl. A tutorial that resets the peak
(amp_recipe's `start_timer`) has a phase per reset, then "end".
"""

import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # sweep.py puts validation/ (run_answers) on it too
from sweep import env_json, run_entries, start  # noqa: E402

#: (NAME, path in pytorch/tutorials, the commit whose text was run, sha256 of that text)
TUTORIALS = [
    (
        "quickstart",
        "beginner_source/basics/quickstart_tutorial.py",
        "afcd669d56554c2ef46f2da92edbfaf8c54043ec",
        "73d1ca9b46151693395a01537bc088b89036057d6a04405f76ebeb4816f2f2f9",
    ),
    (
        "amp_recipe",
        "recipes_source/recipes/amp_recipe.py",
        "00b83bfab7d1cd0cd7c53fbba59db65c2e021bb6",
        "9a57dd2cced4d77fe7a5e3e796a19d524beb92f6bcbbb2d85b6ad5de3bbea1dd",
    ),
    (
        "compiling_optimizer",
        "recipes_source/compiling_optimizer.py",
        "4f3ef4bac924b7bfd47ce29ee76a6b21df0fb6eb",
        "a24041019b23a8b7b18417d06cee9dbaf47fddd92d17ed08403595500f864f99",
    ),
    (
        "compiling_optimizer_lr_scheduler",
        "recipes_source/compiling_optimizer_lr_scheduler.py",
        "258955cec89956025972327f8577e2c0e6d1b4da",
        "23c82f71366f5711a6d286cd0391e284e8b600a0b8496d576c20f35c4170db73",
    ),
    (
        "regional_compilation",
        "recipes_source/regional_compilation.py",
        "2e79846beb0f5aaaee21bfda6ea5e28c682a8b1a",
        "ea47ae704b5b8932a3d4ab13da8ca67cd7208c2a6a874d982a028180baabd6e9",
    ),
    (
        "user_defined_triton_kernel",
        "recipes_source/torch_compile_user_defined_triton_kernel_tutorial.py",
        "10098032865151e891c6074522207880f0e68fd3",
        "c8ab96a0041cb211881f8b88cdbe8b0bcaa0f17821f8c35eaa48ea9b1dcaaaa0",
    ),
    (
        "scaled_dot_product_attention",
        "intermediate_source/scaled_dot_product_attention_tutorial.py",
        "01b1b5fc424e4fd08111fe9774548fc69747b534",
        "3afdc02a5cffa32c9132bd9b3f94976eef2f76a5e7ff94244eab38398565c280",
    ),
    (
        "per_sample_grads",
        "intermediate_source/per_sample_grads.py",
        "0bb46a4a7c3e4a4d185372221fecb5754f68fcca",
        "930e998aaf0a59b867d5285ba7ff385ef73e5a2c03e394a3719ccbe2c3907c7d",
    ),
    (
        "ensembling",
        "intermediate_source/ensembling.py",
        "1dc22dff39bc8f6c862783393b70ca1e1b8ed516",
        "5c693cde51c77c7d7e4116cf0e7cfd2727fcd9b3e4d5d9bc8762cb25b0482038",
    ),
    (
        "neural_tangent_kernels",
        "intermediate_source/neural_tangent_kernels.py",
        "34272e8d6470967947c5798e1ef5b0e4710cc80b",
        "d32b2e2b8be4e671ec441d3d4f4fa4c26a6dee11e4a4a5b7ff28a4cc8a5decf1",
    ),
    (
        "optimizer_step_in_backward",
        "intermediate_source/optimizer_step_in_backward_tutorial.py",
        "2a488705e00cc04c12e905e3d68d351c1834661e",
        "ecb617f01fd9a4635b72cb35753690944fa370e101206970709a8fa1684c1819",
    ),
]


def fake_data(root):
    """FashionMNIST's four idx files for the quickstart (fake_data.mnist: 6,400 training and 1,000
    test images, fewer than the real 60,000 / 10,000 so that its 5 epochs take minutes; the batch
    shapes are the real ones) and torchvision's vit_l_16 initial weights (seed 0) under the file
    name `ViT_L_16_Weights.DEFAULT` looks up in TORCH_HOME/hub/checkpoints (torch.hub checks the
    hash only when it downloads). Deterministic: the same files on every machine."""
    import numpy as np
    from fake_data import mnist

    mnist(
        os.path.join(root, "beginner_source", "basics", "data"),
        np.random.default_rng(0),
        "FashionMNIST",
        (6400, 1000),
    )
    import torch
    import torchvision

    ck = os.path.join(root, ".torch_home", "hub", "checkpoints")
    os.makedirs(ck, exist_ok=True)
    path = os.path.join(ck, "vit_l_16-852ce7e3.pth")
    if not os.path.exists(path):
        torch.manual_seed(0)
        torch.save(torchvision.models.vit_l_16().state_dict(), path)
    print("fake data written under", root)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    args = start(fake_data)
    if args is None:
        return
    mode, root, outdir, names = args
    with open(os.path.join(outdir, f"env_tutorials_{mode}.json"), "w") as f:
        json.dump(env_json(), f)
    todo = [t for t in TUTORIALS if not names or t[0] in names]

    def entries():
        for name, path, _commit, digest in todo:
            folder, script = os.path.split(path)
            mismatch = ("sha256 mismatch",) if sha256(os.path.join(root, path)) != digest else ()
            yield (name, root, folder, [script], 1, *mismatch)

    run_entries(mode, outdir, entries(), ranked=False)


if __name__ == "__main__":
    main()

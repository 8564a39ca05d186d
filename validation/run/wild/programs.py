"""Public training programs (nanoGPT, minGPT, timm's train.py and validate.py) and gpt-fast's inference,
unmodified, under the twin and on a GPU: the second section of validation/run/wild/README.md.

    python validation/run/wild/programs.py data ROOT                     # fake data into the checkouts
    python validation/run/wild/programs.py twin ROOT OUTDIR [NAME ...]    # vramscope run --gpu h200 --json
    python validation/run/wild/programs.py gpu  ROOT OUTDIR [NAME ...]    # record.py, on the GPU

ROOT holds one checkout per repository of REPOS, at its commit, under the repository's name
(ROOT/nanoGPT, ROOT/minGPT, ROOT/pytorch-image-models, ROOT/gpt-fast). twin and gpu write the fake
data first (as `data`; NO_FAKE_DATA=1 skips it), then run each program of PROGRAMS in order, one
process each, from its folder, with the folder's extra PYTHONPATH (minGPT's projects import the
package from the checkout, as `pip install -e .` would), reusing sweep.py's runner: OUTDIR/NAME.out,
NAME.err, OUTDIR/twin.jsonl or gpu.jsonl, OUTDIR/summary.jsonl. Order matters: nanogpt_gpt2_resume
resumes from the checkpoint nanogpt_gpt2_bf16 wrote, the timm_validate_* programs load the
checkpoint of the timm_train_* run before them, the gptfast_*_int8_* programs the one
gptfast_quantize_int8_stories110M wrote. Each program's output folder is removed before it runs (not
for those that read a previous one's). The programs never call reset_peak_memory_stats: one "end"
line each.
"""

import json
import os
import shlex
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # sweep.py puts validation/ (run_answers) on it too
from sweep import env_json, run_entries, start, table_rows  # noqa: E402

# The commits swept (session 56); any later one may behave differently.
REPOS = {
    "nanoGPT": ("karpathy/nanoGPT", "3adf61e154c3fe3fca428ad6bc3818b27a3b8291"),
    "minGPT": ("karpathy/minGPT", "37baab71b9abea1b76ab957409a1cc2fbfba8a26"),
    "pytorch-image-models": ("huggingface/pytorch-image-models", "aa4b5850c1543fa488abf260f18390eda46cf85d"),
    # session 57: the mirror's newest commit (2024-09-15, "Fix Llama3 HF checkpoint converter (#202)")
    "gpt-fast": ("pytorch-labs/gpt-fast", "32971d3129541c5bfb4f715abc33d1c5f408d204"),
}

# Each program: a line "NAME FOLDER PYTHONPATH CLEAN RANKS" (FOLDER under ROOT, where it runs;
# PYTHONPATH under ROOT put first on the path, or -; CLEAN an output folder under FOLDER removed
# before it runs, or -; RANKS: 1, or N for `--nproc N` / torchrun's rank 0 as sweep.py runs them),
# then its script and arguments on the indented lines below. timm's train.py runs from the checkout's
# root, so it imports that checkout's timm.
_TABLE = """
nanogpt_shakespeare_char_eager nanoGPT - out-sc-eager 1
    train.py config/train_shakespeare_char.py --max_iters=4 --eval_interval=2 --eval_iters=2
    --log_interval=1 --always_save_checkpoint=True --compile=False --out_dir=out-sc-eager
nanogpt_shakespeare_char_compile nanoGPT - out-sc-compile 1
    train.py config/train_shakespeare_char.py --max_iters=4 --eval_interval=2 --eval_iters=2
    --log_interval=1 --always_save_checkpoint=True --compile=True --out_dir=out-sc-compile
nanogpt_shakespeare_char_fp32 nanoGPT - out-sc-fp32 1
    train.py config/train_shakespeare_char.py --dtype=float32 --compile=False --max_iters=2
    --eval_interval=2 --eval_iters=2 --out_dir=out-sc-fp32
nanogpt_gpt2_bf16 nanoGPT - out-gpt2-bf16 1
    train.py --compile=False --dtype=bfloat16 --batch_size=8 --gradient_accumulation_steps=2
    --max_iters=3 --eval_interval=2 --eval_iters=2 --warmup_iters=1 --out_dir=out-gpt2-bf16
nanogpt_gpt2_resume nanoGPT - - 1
    train.py --init_from=resume --compile=False --dtype=bfloat16 --batch_size=8
    --gradient_accumulation_steps=2 --max_iters=5 --eval_interval=2 --eval_iters=2 --warmup_iters=1
    --out_dir=out-gpt2-bf16
nanogpt_gpt2_fp16_gradscaler nanoGPT - out-gpt2-fp16 1
    train.py --compile=False --dtype=float16 --batch_size=8 --gradient_accumulation_steps=2
    --max_iters=3 --eval_interval=2 --eval_iters=2 --warmup_iters=1 --out_dir=out-gpt2-fp16
nanogpt_gpt2_bf16_compile nanoGPT - out-gpt2-compile 1
    train.py --compile=True --dtype=bfloat16 --batch_size=8 --gradient_accumulation_steps=2
    --max_iters=3 --eval_interval=2 --eval_iters=2 --warmup_iters=1 --out_dir=out-gpt2-compile
nanogpt_gpt2_eval_only nanoGPT - out-evalonly 1
    train.py --eval_only=True --compile=False --batch_size=8 --eval_iters=3 --out_dir=out-evalonly
nanogpt_bench_eager nanoGPT - - 1
    bench.py --batch_size=4 --compile=False
nanogpt_bench_profiler nanoGPT - bench_log 1
    bench.py --batch_size=4 --compile=False --profile=True --real_data=False
mingpt_chargpt minGPT/projects/chargpt minGPT out 1
    chargpt.py --trainer.max_iters=3
mingpt_adder minGPT/projects/adder minGPT out 1
    adder.py --trainer.max_iters=3 --trainer.num_workers=0
timm_train_resnet50_amp pytorch-image-models - - 1
    train.py --data-dir fake_data --num-classes 4 --epochs 1 -j 2 --log-interval 1 --output out
    --experiment r50 --model resnet50 -b 16 --amp
timm_validate_resnet50_amp pytorch-image-models - - 1
    validate.py --data-dir fake_data --model resnet50 --num-classes 4 -b 16 --amp -j 2 --checkpoint
    out/r50/model_best.pth.tar
timm_train_resnet50_compile_channels_last pytorch-image-models - - 1
    train.py --data-dir fake_data --num-classes 4 --epochs 1 -j 2 --log-interval 1 --output out
    --experiment r50c --model resnet50 -b 16 --amp --channels-last --torchcompile
timm_train_vit_small_bf16_adamw_ema pytorch-image-models - - 1
    train.py --data-dir fake_data --num-classes 4 --epochs 1 -j 2 --log-interval 1 --output out
    --experiment vits --model vit_small_patch16_224 -b 16 --amp --amp-dtype bfloat16 --opt adamw
    --lr 1e-3 --model-ema
timm_train_vit_small_lamb_no_prefetcher pytorch-image-models - - 1
    train.py --data-dir fake_data --num-classes 4 -j 2 --log-interval 1 --output out --experiment
    vitnp --model vit_small_patch16_224 -b 16 --epochs 2 --opt lamb --sched cosine --warmup-epochs 1
    --no-prefetcher --pin-mem --checkpoint-hist 1
timm_validate_vit_small pytorch-image-models - - 1
    validate.py --data-dir fake_data --model vit_small_patch16_224 --num-classes 4 -b 16 --amp -j 2
    --checkpoint out/vitnp/model_best.pth.tar
timm_train_convnext_tiny_bf16 pytorch-image-models - - 1
    train.py --data-dir fake_data --num-classes 4 --epochs 1 -j 2 --log-interval 1 --output out
    --experiment convnext --model convnext_tiny -b 16 --amp --amp-dtype bfloat16 --opt adamw --lr
    1e-3
timm_train_efficientnet_b0_mixup_accum pytorch-image-models - - 1
    train.py --data-dir fake_data --num-classes 4 --epochs 1 -j 2 --log-interval 1 --output out
    --experiment effnet --model efficientnet_b0 -b 16 --amp --mixup 0.8 --cutmix 1.0 --smoothing 0.1
    --grad-accum-steps 2
timm_train_resnet18_augmix_jsd_split_bn pytorch-image-models - - 1
    train.py --data-dir fake_data --num-classes 4 --epochs 1 -j 2 --log-interval 1 --output out
    --experiment jsd --model resnet18 -b 8 --aug-splits 3 --jsd-loss --split-bn --amp
timm_train_vit_small_grad_checkpointing_layer_decay_bce_ema_warmup pytorch-image-models - - 1
    train.py --data-dir fake_data --num-classes 4 --epochs 1 -j 2 --log-interval 1 --output out
    --experiment gcld --model vit_small_patch16_224 -b 16 --amp --opt adamw --lr 5e-4
    --grad-checkpointing --layer-decay 0.65 --drop-path 0.1 --bce-loss --model-ema
    --model-ema-warmup
timm_train_deit_tiny_distilled pytorch-image-models - - 1
    train.py --data-dir fake_data --num-classes 4 --epochs 1 -j 2 --log-interval 1 --output out
    --experiment deit --model deit_tiny_distilled_patch16_224 -b 16 --amp --opt adamw --lr 5e-4
timm_train_naflexvit_base_bf16 pytorch-image-models - - 1
    train.py --data-dir fake_data --num-classes 4 --epochs 1 -j 2 --log-interval 1 --output out
    --experiment naflex --model naflexvit_base_patch16_gap -b 16 --amp --amp-dtype bfloat16 --opt
    adamw --lr 5e-4 --naflex-loader --naflex-train-seq-lens 64 128 --naflex-max-seq-len 128
timm_benchmark_resnet50_both pytorch-image-models - - 1
    benchmark.py --model resnet50 --bench both -b 16 --amp --num-warm-iter 2 --num-bench-iter 5
gptfast_stories15M_eager gpt-fast - - 1
    generate.py --checkpoint_path checkpoints/stories15M/model.pth --num_samples 2 --max_new_tokens 50
gptfast_stories110M_eager gpt-fast - - 1
    generate.py --checkpoint_path checkpoints/stories110M/model.pth --num_samples 2 --max_new_tokens 100
gptfast_stories15M_batch8_prompt200_eager gpt-fast - - 1
    generate.py --checkpoint_path checkpoints/stories15M/model.pth --num_samples 1 --max_new_tokens 32
    --batch_size 8 --prompt 200
gptfast_stories15M_compile gpt-fast - - 1
    generate.py --checkpoint_path checkpoints/stories15M/model.pth --num_samples 2 --max_new_tokens 50
    --compile
gptfast_stories110M_compile_prefill gpt-fast - - 1
    generate.py --checkpoint_path checkpoints/stories110M/model.pth --num_samples 2 --max_new_tokens 64
    --compile --compile_prefill
gptfast_stories110M_batch4_compile gpt-fast - - 1
    generate.py --checkpoint_path checkpoints/stories110M/model.pth --num_samples 2 --max_new_tokens 50
    --batch_size 4 --compile
gptfast_quantize_int8_stories110M gpt-fast - - 1
    quantize.py --checkpoint_path checkpoints/stories110M/model.pth --mode int8
gptfast_stories110M_int8_eager gpt-fast - - 1
    generate.py --checkpoint_path checkpoints/stories110M/model_int8.pth --num_samples 2
    --max_new_tokens 50
gptfast_stories110M_int8_compile gpt-fast - - 1
    generate.py --checkpoint_path checkpoints/stories110M/model_int8.pth --num_samples 2
    --max_new_tokens 50 --compile
gptfast_stories15M_compile_profile gpt-fast - - 1
    generate.py --checkpoint_path checkpoints/stories15M/model.pth --num_samples 2 --max_new_tokens 32
    --compile --profile trace
nanogpt_shakespeare_char_ddp2 nanoGPT - out-sc-ddp 2
    train.py config/train_shakespeare_char.py --compile=False --max_iters=3 --eval_interval=2
    --eval_iters=2 --gradient_accumulation_steps=2 --out_dir=out-sc-ddp
timm_train_resnet50_ddp2_sync_bn pytorch-image-models - - 2
    train.py --data-dir fake_data --num-classes 4 --epochs 1 -j 2 --log-interval 1 --output out
    --experiment ddp --model resnet50 -b 16 --amp --sync-bn
timm_train_resnet50_ddp2_compile pytorch-image-models - - 2
    train.py --data-dir fake_data --num-classes 4 --epochs 1 -j 2 --log-interval 1 --output out
    --experiment ddpc --model resnet50 -b 16 --amp --torchcompile
gptfast_stories110M_tp2_eager gpt-fast - - 2
    generate.py --checkpoint_path checkpoints/stories110M/model.pth --num_samples 2 --max_new_tokens 50
gptfast_stories110M_tp2_compile gpt-fast - - 2
    generate.py --checkpoint_path checkpoints/stories110M/model.pth --num_samples 2 --max_new_tokens 50
    --compile
gptfast_stories110M_int8_tp2_compile gpt-fast - - 2
    generate.py --checkpoint_path checkpoints/stories110M/model_int8.pth --num_samples 2
    --max_new_tokens 50 --compile
"""


def _programs():
    out = []
    for (name, folder, extra, clean, ranks), cmd in table_rows(_TABLE):
        out.append(
            (name, folder, None if extra == "-" else extra, None if clean == "-" else clean, int(ranks), cmd)
        )
    return out


#: (NAME, FOLDER, PYTHONPATH or None, CLEAN or None, RANKS, script and arguments)
PROGRAMS = _programs()
_TIMM_OUT = "pytorch-image-models/out"


def gptfast_data(root):
    """gpt-fast's inputs, as its scripts/prepare.sh would leave them (downloaded, converted) but random:
    checkpoints/NAME/model.pth, the state_dict of the checkout's own model.py
    `Transformer.from_name(NAME)` (fp32, torch seed 0), for the two small configs of its
    `transformer_configs` (stories15M, stories110M: generate.py's `_load_model` picks the config by
    the folder's name), and beside each the `tokenizer.model` generate.py reads there: a SentencePiece
    model trained here (sentencepiece, as tokenizer.py's SentencePieceWrapper loads it) with the
    models' 32,000 pieces (generate.py decodes the sampled ids: each must be a piece), a character
    model over printable ASCII filled with user-defined symbols, so the default prompt "Hello, my
    name is" is the same 18 ids (with BOS) on every machine."""
    import importlib.util
    import io

    import sentencepiece as spm
    import torch

    ckpt = os.path.join(root, "gpt-fast", "checkpoints")
    spec = importlib.util.spec_from_file_location("gptfast_model", os.path.join(root, "gpt-fast", "model.py"))
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    text = ["".join(chr(c) for c in range(33, 127)), "Hello, my name is"] * 10
    user = 32000 - 3 - len(set("".join(text)))  # <unk>, <s>, </s>, the characters (and U+2581)
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=proto,
        vocab_size=32000,
        model_type="char",
        user_defined_symbols=[f"<t{i}>" for i in range(user)],
        num_threads=1,
        minloglevel=2,
    )
    for name in ("stories15M", "stories110M"):
        d = os.path.join(ckpt, name)
        os.makedirs(d, exist_ok=True)
        torch.manual_seed(0)
        torch.save(model.Transformer.from_name(name).state_dict(), os.path.join(d, "model.pth"))
        with open(os.path.join(d, "tokenizer.model"), "wb") as f:
            f.write(proto.getvalue())


def fake_data(root):
    """Deterministic fake inputs (numpy seed 0) in the layout each program reads; only their sizes
    matter. gpt-fast's when its checkout is under ROOT; the other three's (one numpy stream) when
    nanoGPT's is."""
    import pickle

    import numpy as np

    if os.path.isdir(os.path.join(root, "gpt-fast")):
        gptfast_data(root)
    if not os.path.isdir(os.path.join(root, "nanoGPT")):
        print("fake data written under", root)
        return
    rng = np.random.default_rng(0)
    # nanoGPT: data/DATASET/{train,val}.bin of uint16 token ids (train.py's get_batch memmaps them);
    # shakespeare_char's meta.pkl gives vocab_size 65 as its prepare.py writes it.
    for ds, vocab in (("openwebtext", 50257), ("shakespeare_char", 65)):
        d = os.path.join(root, "nanoGPT", "data", ds)
        os.makedirs(d, exist_ok=True)
        rng.integers(0, vocab, size=200_000, dtype=np.uint16).tofile(os.path.join(d, "train.bin"))
        rng.integers(0, vocab, size=20_000, dtype=np.uint16).tofile(os.path.join(d, "val.bin"))
    chars = [chr(i) for i in range(32, 32 + 65)]
    with open(os.path.join(root, "nanoGPT", "data", "shakespeare_char", "meta.pkl"), "wb") as f:
        pickle.dump(
            {"vocab_size": 65, "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}, f
        )
    # minGPT chargpt: input.txt of 200,000 characters over 63 distinct ones (its vocabulary).
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ,.;:!?\n'-&"
    text = "".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=200_000))
    with open(os.path.join(root, "minGPT", "projects", "chargpt", "input.txt"), "w") as f:
        f.write(text)
    # timm: an ImageFolder of 4 classes, 24 train and 12 validation RGB PNGs of 256 x 256 each.
    from PIL import Image

    for split, n in (("train", 24), ("validation", 12)):
        for c in range(4):
            d = os.path.join(root, "pytorch-image-models", "fake_data", split, f"class{c}")
            os.makedirs(d, exist_ok=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)).save(
                    os.path.join(d, f"img{i:03d}.png")
                )
    print("fake data written under", root)


def main():
    args = start(fake_data, torch_home=False)
    if args is None:
        return
    mode, root, outdir, names = args
    todo = [p for p in PROGRAMS if not names or p[0] in names]
    if not names:
        shutil.rmtree(os.path.join(root, _TIMM_OUT), ignore_errors=True)
    with open(os.path.join(outdir, f"env_programs_{mode}.json"), "w") as f:
        json.dump(env_json(), f)
    base_path = os.environ.get("PYTHONPATH", "")

    def entries():
        for name, folder, extra, clean, ranks, cmd in todo:
            if clean:
                shutil.rmtree(os.path.join(root, folder, clean), ignore_errors=True)
            os.environ["PYTHONPATH"] = os.pathsep.join(
                p for p in (os.path.join(root, extra) if extra else "", base_path) if p
            )
            yield name, root, folder, shlex.split(cmd), ranks

    run_entries(mode, outdir, entries())
    os.environ["PYTHONPATH"] = base_path


if __name__ == "__main__":
    main()

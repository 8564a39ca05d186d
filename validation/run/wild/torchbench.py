"""TorchBench's models (github:pytorch/benchmark), unmodified, under the twin and on a GPU: the
TorchBench section of validation/run/wild/README.md.

    python validation/run/wild/torchbench.py data CHECKOUT                   # fake weights
    python validation/run/wild/torchbench.py twin CHECKOUT OUTDIR [NAME ...]  # vramscope run --gpu h200
    python validation/run/wild/torchbench.py gpu  CHECKOUT OUTDIR [NAME ...]  # record.py, on the GPU

CHECKOUT is pytorch/benchmark at COMMIT. twin and gpu write the fake weights first (as `data`;
NO_FAKE_DATA=1 skips it; TORCH_HOME=CHECKOUT/.torch_home), then run torchbench_driver.py for each
model of MODELS from CHECKOUT, one process each, reusing sweep.py's runner: OUTDIR/NAME.out,
NAME.err, OUTDIR/twin.jsonl or gpu.jsonl, OUTDIR/summary.jsonl. Each run has three phases: phase0
(the train model built and invoked), phase1 (the eval model), end.
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from run_answers import answer  # noqa: E402
from sweep import env_json, gpu_run, write_result  # noqa: E402

# The commit swept (session 56); any later one may behave differently.
COMMIT = "0e83c440a51cd63464fee34724d01b7c814ce39b"
DRIVER = os.path.join(HERE, "torchbench_driver.py")

# torchvision's initial weights under the file names the models' IMAGENET1K_V1 weights ask for in
# TORCH_HOME/hub/checkpoints (torch.hub.load_state_dict_from_url checks the hash only when it
# downloads): a fresh model's state_dict, the same sizes as the real ones.
TV_WEIGHTS = {
    "alexnet": "AlexNet_Weights",
    "densenet121": "DenseNet121_Weights",
    "mnasnet1_0": "MNASNet1_0_Weights",
    "mobilenet_v2": "MobileNet_V2_Weights",
    "mobilenet_v3_large": "MobileNet_V3_Large_Weights",
    "resnext50_32x4d": "ResNeXt50_32X4D_Weights",
    "resnet152": "ResNet152_Weights",
    "resnet18": "ResNet18_Weights",
    "resnet50": "ResNet50_Weights",
    "shufflenet_v2_x1_0": "ShuffleNet_V2_X1_0_Weights",
    "squeezenet1_1": "SqueezeNet1_1_Weights",
    "vgg16": "VGG16_Weights",
}

# timm's models of TorchBench whose pretrained weights timm fetches from the Hugging Face hub: a
# fresh model's state_dict as the hub cache's pytorch_model.bin (HF_HOME=CHECKOUT/.hf_home,
# HF_HUB_OFFLINE=1 reads it from snapshots/REVISION through refs/main); vit_giant_patch14_224
# (timm_vision_transformer_large, 4 GB of weights) is left out.
TIMM_MODELS = ("efficientnet_b0", "dm_nfnet_f0", "regnety_120", "resnest14d", "vit_small_patch16_224")

# (NAME, model, driver arguments after the model): the model's default batch sizes, 2 iterations of
# each test, both tests in one process but for moco (its constructor's init_process_group raises
# ValueError when called twice in a process: one process a test, as TorchBench's run.py runs them).
# Models that implement neither test on CUDA outside TorchBench's dynamo harness (simple_gpt,
# simple_gpt_tp_manual, llama_v2_7b_16h without a hub token) are left out; modded_nanogpt, whose
# train and eval raise NotImplementedError after its constructor, is kept for the constructor's memory.
_NAMES = """
resnet18 resnet50 resnet152 resnext50_32x4d alexnet vgg16 densenet121 squeezenet1_1 mobilenet_v2
mobilenet_v3_large shufflenet_v2_x1_0 mnasnet1_0 mobilenet_v2_quantized_qat resnet50_quantized_qat
timm_efficientnet timm_regnet timm_resnest timm_vovnet timm_nfnet timm_vision_transformer
timm_vision_transformer_large BERT_pytorch nanogpt llama modded_nanogpt cm3leon_generate demucs dcgan
pytorch_unet tts_angular nvidia_deeprecommender phlippe_resnet phlippe_densenet functorch_dp_cifar10
lennard_jones maml microbench_unbacked_tolist_sum pyhpc_equation_of_state pyhpc_isoneutral_mixing
pyhpc_turbulent_kinetic_energy
"""
MODELS = [(n, n, "") for n in _NAMES.split()] + [
    ("moco_train", "moco", "--tests train"),
    ("moco_eval", "moco", "--tests eval"),
]


def data(checkout):
    import torch
    import torchvision

    torch.manual_seed(0)
    ck = os.path.join(checkout, ".torch_home", "hub", "checkpoints")
    os.makedirs(ck, exist_ok=True)
    for name, weights in TV_WEIGHTS.items():
        url = getattr(torchvision.models, weights).IMAGENET1K_V1.url
        path = os.path.join(ck, os.path.basename(url))
        if not os.path.exists(path):
            torch.save(getattr(torchvision.models, name)().state_dict(), path)
    import timm

    for name in TIMM_MODELS:
        model = timm.create_model(name, pretrained=False)
        repo = model.pretrained_cfg["hf_hub_id"]
        cache = os.path.join(checkout, ".hf_home", "hub", "models--" + repo.replace("/", "--"))
        rev = "0" * 40
        path = os.path.join(cache, "snapshots", rev, "pytorch_model.bin")
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.makedirs(os.path.join(cache, "refs"), exist_ok=True)
            with open(os.path.join(cache, "refs", "main"), "w") as f:
                f.write(rev)
            torch.save(model.state_dict(), path)


def main():
    mode, checkout = sys.argv[1], os.path.abspath(sys.argv[2])
    os.environ["TORCH_HOME"] = os.path.join(checkout, ".torch_home")
    os.environ["HF_HOME"] = os.path.join(checkout, ".hf_home")
    os.environ["HF_HUB_OFFLINE"] = "1"
    if mode == "_data":
        return data(checkout)
    if mode == "data" or not os.environ.get("NO_FAKE_DATA"):
        # its own process, so the runs' processes alone import torch under the twin or record.py
        subprocess.run([sys.executable, __file__, "_data", checkout], check=True)
    if mode == "data":
        return
    outdir, names = os.path.abspath(sys.argv[3]), sys.argv[4:]
    os.makedirs(outdir, exist_ok=True)
    os.environ.setdefault("GPU", "h200")
    with open(os.path.join(outdir, f"env_torchbench_{mode}.json"), "w") as f:
        json.dump(env_json(), f)
    todo = [m for m in MODELS if not names or m[0] in names]
    with (
        open(os.path.join(outdir, f"{mode}.jsonl"), "a") as out,
        open(os.path.join(outdir, "summary.jsonl"), "a") as summary,
    ):
        for name, model, args in todo:
            argv = [DRIVER, model, *args.split()]
            log = os.path.join(outdir, name)
            t0 = time.time()
            if mode == "twin":
                lines = answer(argv[0], argv[1:], cwd=checkout, name=name, log=log)
                rc = lines[-1]["exit"]
            else:
                rc, lines = gpu_run(checkout, ".", argv, name, log, int(os.environ.get("TIMEOUT", "600")), 1)
            write_result(out, summary, {"script": name, "mode": mode, "rc": rc}, lines, t0)


if __name__ == "__main__":
    main()

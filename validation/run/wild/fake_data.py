"""Fake datasets for the pytorch/examples sweep (validation/run/wild/), written into a checkout in
the layout each example's dataset class checks, so no example downloads anything:

    python validation/run/wild/fake_data.py CHECKOUT [TORCH_HOME]

Contents are deterministic (numpy seed 0) and meaningless; only the sizes a program sees matter,
and they are the same on every machine that runs this:
- CHECKOUT/data/MNIST/raw and CHECKOUT/mnist_forward_forward/data/MNIST/raw: the four idx files
  torchvision.datasets.MNIST._check_exists looks for (60,000 train / 10,000 test images of 28 x 28,
  labels i % 10), read by read_sn3_pascalvincent_tensor (magic 2051 images, 2049 labels).
- CHECKOUT/word_language_model/data/wikitext-2/train.txt: valid.txt then test.txt (the repository
  stores train.txt in Git LFS; the vocabulary is then that of valid and test).
- CHECKOUT/imagenet/fake/{train,val}/cNN/*.JPEG: an ImageFolder of 2 classes x 8 RGB JPEGs 320 x 280.
- CHECKOUT/fast_neural_style/fake_coco/c/*.jpg: 8 RGB JPEGs 320 x 280 (the train subcommand's
  --dataset), CHECKOUT/fast_neural_style/fake_models/random.pth: a TransformerNet's initial
  state_dict (the eval subcommand's --model), and TORCH_HOME/hub/checkpoints/vgg16-397923af.pth:
  torchvision's vgg16() initial state_dict under the file name VGG16_Weights.IMAGENET1K_V1 asks for
  (torch.hub.load_state_dict_from_url checks the hash only when it downloads).
"""

import os
import shutil
import struct
import sys

import numpy as np


def mnist(root, rng, name="MNIST", sizes=(60000, 10000)):
    raw = os.path.join(root, name, "raw")
    os.makedirs(raw, exist_ok=True)
    for prefix, n in zip(("train", "t10k"), sizes, strict=True):
        img = os.path.join(raw, f"{prefix}-images-idx3-ubyte")
        lab = os.path.join(raw, f"{prefix}-labels-idx1-ubyte")
        with open(img, "wb") as f:
            f.write(struct.pack(">iiii", 2051, n, 28, 28))
            f.write(rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8).tobytes())
        with open(lab, "wb") as f:
            f.write(struct.pack(">ii", 2049, n))
            f.write((np.arange(n) % 10).astype(np.uint8).tobytes())


def jpegs(folder, n, rng, size=(320, 280)):
    from PIL import Image

    os.makedirs(folder, exist_ok=True)
    for i in range(n):
        a = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
        Image.fromarray(a).save(os.path.join(folder, f"img{i:03d}.JPEG"), quality=90)


def main():
    co = os.path.abspath(sys.argv[1])
    torch_home = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else os.path.join(co, ".torch_home")
    rng = np.random.default_rng(0)
    mnist(os.path.join(co, "data"), rng)
    mnist(os.path.join(co, "mnist_forward_forward", "data"), rng)

    wt = os.path.join(co, "word_language_model", "data", "wikitext-2")
    with open(os.path.join(wt, "train.txt"), "w") as out:
        for part in ("valid.txt", "test.txt"):
            with open(os.path.join(wt, part)) as f:
                shutil.copyfileobj(f, out)

    for split in ("train", "val"):
        for c in range(2):
            jpegs(os.path.join(co, "imagenet", "fake", split, f"c{c:02d}"), 8, rng)
    jpegs(os.path.join(co, "fast_neural_style", "fake_coco", "c"), 8, rng)

    import torch
    import torchvision

    torch.manual_seed(0)
    sys.path.insert(0, os.path.join(co, "fast_neural_style", "neural_style"))
    from transformer_net import TransformerNet

    os.makedirs(os.path.join(co, "fast_neural_style", "fake_models"), exist_ok=True)
    torch.save(
        TransformerNet().state_dict(), os.path.join(co, "fast_neural_style", "fake_models", "random.pth")
    )
    ck = os.path.join(torch_home, "hub", "checkpoints")
    os.makedirs(ck, exist_ok=True)
    torch.save(torchvision.models.vgg16().state_dict(), os.path.join(ck, "vgg16-397923af.pth"))
    print("fake data written under", co, "and", torch_home)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The project's two set-up commands (README.md):
#   bash scripts/dev.sh demo   set up, then `vramscope run` on the built-in example and
#                              "will it fit, and why" for a built-in model on an A100 40GB
#   bash scripts/dev.sh test   set up, then the whole test suite (Rust and Python)
# Set-up: a virtual environment in .venv with PyTorch 2.11.0 (the CUDA wheel
# from the package index: it imports without a GPU), maturin, pytest and ruff,
# and the vramscope package built into it from this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"

setup() {
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON" -m venv "$VENV"
    fi
    if ! "$VENV/bin/python" -c "import torch, maturin, pytest, xdist" 2>/dev/null \
        || [ "$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')" != "2.11.0" ]; then
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
        "$VENV/bin/python" -m pip install --quiet "torch==2.11.0" "maturin>=1.8,<2" pytest pytest-xdist ruff numpy
    fi
    # the libraries the validation scripts use (validation/run/); opt-einsum as on the GPU machine
    # that recorded them: with it installed, torch.einsum of three or more operands contracts them
    # in opt_einsum's order (torch/backends/opt_einsum), which decides its intermediates
    if ! "$VENV/bin/python" -c "import torchvision, transformers, timm, peft, opt_einsum" 2>/dev/null; then
        "$VENV/bin/python" -m pip install --quiet "torchvision==0.26.0" "transformers==5.17.0" \
            "timm==1.0.31" "peft==0.21.2" "opt-einsum==3.4.0"
    fi
    # headless Chromium for the HTML report's browser test (Debian's package)
    if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
            || echo "dev.sh: could not install chromium; the browser test will be skipped (or fail under CI)" >&2
    fi
    # the Rust core, built into the environment (an editable install of python/)
    (. "$VENV/bin/activate" && maturin develop --release --quiet)
}

case "${1:-}" in
    demo)
        setup
        "$VENV/bin/vramscope" run --example
        echo
        echo '$ vramscope estimate --model llama-3.2-1b --mode train --batch 4 --seq 2048 --gpu a100-40gb'
        exec "$VENV/bin/vramscope" estimate --model llama-3.2-1b --mode train --batch 4 --seq 2048 --gpu a100-40gb
        ;;
    test)
        setup
        cargo test --workspace
        "$VENV/bin/python" -m pytest -q -n 2 python/tests
        ;;
    setup)
        setup
        ;;
    *)
        echo "usage: bash scripts/dev.sh demo|test|setup" >&2
        exit 2
        ;;
esac

#!/bin/bash
# On a GPU, from the repo root: `OUT=DIR bash validation/va_run/go_s21.sh` (session 21, 70 s on one H200): blind50/ax01 and
# blind64/bl01 with their maps read after each op (fixtures/va_maps/run_maps2_h200.tar.xz: r/NAME.m.*), and blind68/bp02's
# memory history with frames (its segment actions: fixtures/run/placement/bp02_…_h200.json).
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
unset PYTORCH_CUDA_ALLOC_CONF
P=validation/va_run_maps.py
OUT=$OUT/ax01 MAX_OPS=9000 timeout 55 python3 $P validation/run/blind50/ax01_pgd_adversarial_training_resnet18.py > $OUT/ax01.out 2>&1 &
OUT=$OUT/bl01 MAX_OPS=30000 timeout 55 python3 $P validation/run/blind64/bl01_hf_llama_eager_attention_left_padding.py > $OUT/bl01.out 2>&1 &
OUT_PICKLE=$OUT/bp02.pickle timeout 55 python3 validation/run/history.py validation/run/blind68/bp02_unet_groupnorm_silu_channels_last_bf16.py > $OUT/bp02.out 2>&1 &
wait
cd $OUT && xz -T8 -3 *.json *.pickle 2>/dev/null; tail -c 600 *.out; ls -la

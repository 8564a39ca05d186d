#!/bin/bash
# On a GPU, from the repo root: `OUT=DIR bash validation/va_run/go.sh` -> DIR/all.tar.xz (fixtures/va_maps/run_maps_h200.tar.xz).
# Op-by-op maps (first 15,000 ops) and a plain memory-history run of each case, two processes at once.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
unset PYTORCH_CUDA_ALLOC_CONF
R=$OUT/r; mkdir -p $R
P=validation/va_run_maps.py
for s in blind21/u06_adam_capturable_amsgrad_ema_lerp blind21/u02_hf_wav2vec2_ctc_train blind25/y02_fp16_autocast_gradscaler_init_scale_one blind25/y04_torch_func_maml_inner_loop blind23/w04_meta_init_to_empty_llama blind25/y06_handwritten_llama_rope_gqa_bf16; do
  n=$(basename $s)
  OUT=$R/$n.m MAX_OPS=15000 timeout 80 python3 $P validation/run/$s.py > $R/$n.m.out 2>&1 &
  OUT=$R/$n.h NO_MAPS=1 timeout 80 python3 $P validation/run/$s.py > $R/$n.h.out 2>&1 &
done
wait
cd $OUT && tar cJf all.tar.xz r && rm -rf r && ls -la

#!/bin/bash
# One H200 call (issue #31, session 22; docs/driver-placement.md): the scripts run as record.sh runs them,
# no memory history, their segments and maps read after the last figure (recsnap.py); and syn.py.
#   OUT=DIR bash validation/va_plain/go.sh  ->  DIR/place_h200.tar.xz
set -u
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
unset PYTORCH_CUDA_ALLOC_CONF
W=/tmp/pl; mkdir -p $W
R=validation/run
run() { # NAME SCRIPT
  SNAP_JSON=$W/$1.snap.json OUT_JSONL=$W/$1.jsonl timeout -k 5 ${T:-150} python3 validation/va_plain/recsnap.py $2 > $W/$1.out 2> $W/$1.err
}
python3 validation/va_plain/syn.py > $W/syn.out 2> $W/syn.err &
for k in 1 2 3; do run y06.$k $R/blind25/y06_handwritten_llama_rope_gqa_bf16.py & done
for k in 1 2; do run ap01.$k $R/blind42/ap01_hf_qwen3_generate_output_scores.py & done
run bv06.1 $R/blind74/bv06_hf_marian_generate_beams5_fp16.py &
run bw05.1 $R/blind75/bw05_hf_perceiver_mlm_train.py &
run bp02.1 $R/blind68/bp02_unet_groupnorm_silu_channels_last_bf16.py &
run bh05.1 $R/blind60/bh05_gan_parametrized_orthogonal_hinge.py &
run bh06.1 $R/blind60/bh06_hf_t5_encoder_retrieval_inbatch_bf16.py &
wait
cd $W && tar cJf $OUT/place_h200.tar.xz * && ls -la $W && cat syn.out syn.err | head -80 && tail -n 3 *.out && tail -n 2 *.err

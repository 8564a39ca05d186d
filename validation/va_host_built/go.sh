#!/bin/bash
# On a GPU, from the repo root: `OUT=DIR bash validation/va_host_built/go.sh` -> DIR/hpl.tar.xz (fixtures/va_maps/host_built_h200.tar.xz).
# validation/va_host_built.py over eleven host-built blind scripts (ag02 and ah05 twice) and three synthetic cases, all at once, one process each.
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
unset PYTORCH_CUDA_ALLOC_CONF
R=$OUT/h; mkdir -p $R
V=validation/run
i=0
for s in blind33/ag02_hf_xlmr_250k_vocab_fused_adamw_fp16 blind34/ah05_hf_qwen3_moe_train_bf16 blind34/ah02_hf_clip_contrastive_train_bf16 blind4/d01_hf_mistral_train_adamw_loop blind24/x01_hf_mistral_sliding_window_train_bf16 blind16/p06_peft_lora_phi3_all_linear_fused blind29/ac01_hf_granite_train_bf16 blind25/y06_handwritten_llama_rope_gqa_bf16 blind26/z05_hf_bart_beam_search_fp16 blind31/ae01_hf_llama_packed_position_ids_bf16 blind15/o01_hf_opt_gc_bf16_autocast blind33/ag02_hf_xlmr_250k_vocab_fused_adamw_fp16 blind34/ah05_hf_qwen3_moe_train_bf16; do
  i=$((i+1)); n=$(basename $s | cut -d_ -f1).$i
  OUT=$R/$n timeout 120 python3 validation/va_host_built.py $V/$s.py > $R/$n.out 2>&1 &
done
for m in none big bigpar; do
  OUT=$R/syn_$m timeout 90 python3 validation/va_host_built.py validation/va_host_built/syn.py $m > $R/syn_$m.out 2>&1 &
done
wait
cd $OUT && tar cJf hpl.tar.xz h && rm -rf h && ls -la

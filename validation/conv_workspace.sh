#!/bin/bash
# cuDNN's convolution workspaces on this GPU, for the twin's measured table
# (crates/engine/src/ops/conv_workspace_h100.tsv is made from them):
#   bash validation/conv_workspace.sh OUTDIR
# One process per problem and dtype, several at once; then
#   python3 validation/conv_workspace_table.py OUTDIR/conv_sizes.jsonl OUTDIR/conv_pressure.jsonl
set -u
out="${1:-conv_out}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out/work"
# ViT patch embeddings: the fixtures' (hidden 384) over the plan's range, the
# presets' and common ones over estimates' range; the fixtures' first
jobs=()
for dt in bf16 fp32 fp16; do
  jobs+=("sizes 384 16 224 $dt 1-256,264-512/8"
         "pressure 384 16 224 $dt 1-128" "pressure 384 16 224 $dt 129-256,264-512/8")
done
for dt in fp32 bf16 fp16; do
  jobs+=("sizes 768 16 224 $dt 1-256" "pressure 768 16 224 $dt 1-128" "pressure 768 16 224 $dt 129-256")
  # ViT-B/32 at 384 px (the second unseen set's), CLIP/DINOv2-style /14 patches, ViT-L/16 at 384
  for kpi in "192 16 224" "1024 16 224" "768 32 224" "768 16 384" \
             "768 32 384" "1024 14 224" "1024 16 384"; do
    jobs+=("sizes $kpi $dt 1-128" "pressure $kpi $dt 1-128")
  done
done
# other image sizes (the seventh unseen set's ViT: hidden 384, /16 patches, 160 px), workspaces
# only
for dt in fp32 bf16 fp16; do
  for kpi in "384 16 160" "768 16 160" "384 32 160" "768 32 160" \
             "384 16 256" "768 16 256" "384 32 256" "768 32 256"; do
    jobs+=("sizes $kpi $dt 1-128")
  done
done
# a grid of other widths and patchings, workspaces only (what try_configs falls back to is
# measured for hidden 384 alone)
for dt in fp32 bf16 fp16; do
  for k in 256 512 640 1280; do
    for pi in "16 224" "32 224" "14 224" "16 384" "32 384"; do
      jobs+=("sizes $k $pi $dt 1-128")
    done
  done
done
# image sizes beside 224/384 (the seventeenth unseen set's ViTs: /14 patches at 112 and 168 px), and
# real models' (/14 at 336 and 518, /16 at 448, /8 at 224), over the widths of the grid above;
# CONV_PART=images2 runs this part alone
images2=()
for kpi in "768 14 112" "512 14 168" "256 14 112"; do
  images2+=("sizes $kpi bf16 1-128" "sizes $kpi fp16 1-128" "sizes $kpi fp32 1-128")
done
for pi in "14 112" "14 168" "14 336" "14 518" "16 448" "8 224"; do
  for k in 192 256 384 512 768 1024 1280; do
    for dt in bf16 fp32 fp16; do
      case " ${images2[*]} " in *" sizes $k $pi $dt 1-128 "*) continue ;; esac
      images2+=("sizes $k $pi $dt 1-128")
    done
  done
done
if [ "${CONV_PART:-all}" = images2 ]; then jobs=("${images2[@]}"); else jobs+=("${images2[@]}"); fi
i=0
for j in "${jobs[@]}"; do
  echo "$j $out/work/$i.jsonl"; i=$((i+1))
done | xargs -P "${JOBS:-8}" -L 1 sh -c 'python3 '"$here"'/conv_workspace.py "$@" || echo "failed: $*" >&2' _
# CONV_SOLO=0 leaves out the large batches below (minutes of GPU time; the whole-card
# bisections of the fixtures' ViT on an H100 need them)
if [ "${CONV_SOLO:-1}" = 1 ] && [ "${CONV_PART:-all}" = all ]; then
  # then alone on the GPU (tens of GiB: beside the others, they ran out of memory): the fixtures'
  # ViT (hidden 384) in fp32 at the batches where its whole-card plan lands (largest batch near
  # 3,720: validation/wholecard_vit_plan_cases.json)
  python3 "$here/conv_workspace.py" sizes 384 16 224 fp32 3584-3840 "$out/work/solo0.jsonl" \
    || echo "failed: sizes 384 16 224 fp32 3584-3840" >&2
  # and in bf16 and fp16 (the two at once: about 10 GiB each), from 6144, where the whole-card
  # bisections of validation/wholecard_vit16_plan_cases.json land after 4096 fits (to 7960: the
  # two ran about 7 minutes to get there, beside the rest of this script)
  for dt in bf16 fp16; do
    python3 "$here/conv_workspace.py" sizes 384 16 224 $dt 4096,6144-7960 "$out/work/solo_$dt.jsonl" \
      || echo "failed: sizes 384 16 224 $dt 4096,6144-7960" >&2 &
  done
  wait
fi
: > "$out/conv_sizes.jsonl"; : > "$out/conv_pressure.jsonl"
for f in "$out"/work/*.jsonl; do
  if grep -q '"mode": "sizes"' "$f"; then cat "$f" >> "$out/conv_sizes.jsonl"; else cat "$f" >> "$out/conv_pressure.jsonl"; fi
done
wc -l "$out"/conv_*.jsonl

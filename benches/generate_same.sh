#!/usr/bin/env bash
# Whether two vramscope binaries answer the same generate workloads byte for byte (issue #32's
# speed work changes no figure): `estimate --json` of each, its stderr and its exit code.
#   bash benches/generate_same.sh BEFORE AFTER    (exit 1 where one differs)
# Build BEFORE from the base commit into a copy (`cargo build --release -p vramscope` there, or
# `cp target/release/vramscope /tmp/before` before the change). No GPU.
set -u
a=$1
b=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
w=(
    "--model llama-3.1-70b --batch 8 --seq 4096 --new-tokens 4096 --gpu h200 --weights bf16 --cache dynamic"
    "--model llama-3.1-70b --batch 8 --seq 4096 --new-tokens 4096 --gpu h200 --weights bf16 --cache static"
    "--model llama-3.1-70b --batch 8 --seq 4096 --new-tokens 4096 --gpu h100 --weights bf16 --cache dynamic"
    "--model llama-3.1-70b --batch 8 --seq 4096 --new-tokens 4096 --gpu h100 --weights bf16 --cache static"
    "--model llama-3.1-70b --batch 8 --seq 4096 --new-tokens 4096 --gpu h200 --weights fp32 --cache dynamic"
    "--model llama-3.1-70b --batch 1 --seq 4096 --new-tokens 4096 --gpu h200 --weights bf16 --cache dynamic"
    "--model llama-3.1-8b --batch 8 --seq 4096 --new-tokens 4096 --gpu h200 --weights bf16 --cache dynamic"
    "--model llama-3.1-8b --batch 8 --seq 4096 --new-tokens 4096 --gpu h200 --weights bf16 --cache static"
    "--model mistral-7b --batch 4 --seq 2048 --new-tokens 1024 --gpu h200 --weights bf16 --cache dynamic"
    "--model gemma-2-9b --batch 4 --seq 2048 --new-tokens 2048 --gpu h200 --weights bf16 --cache dynamic"
    "--model gemma-3-12b --batch 4 --seq 2048 --new-tokens 2048 --gpu h200 --weights bf16 --cache dynamic"
    "--model qwen3-8b --batch 4 --seq 2048 --new-tokens 1024 --gpu h200 --weights bf16 --cache dynamic"
    "--model qwen3-0.6b --batch 16 --seq 1024 --new-tokens 2048 --gpu h100 --weights bf16 --cache static"
)
bad=0
for i in "${!w[@]}"; do
    # shellcheck disable=SC2086 # (the workload's words)
    "$a" estimate --mode generate ${w[$i]} --json > "$d/a$i.json" 2> "$d/a$i.err"
    ra=$?
    # shellcheck disable=SC2086
    "$b" estimate --mode generate ${w[$i]} --json > "$d/b$i.json" 2> "$d/b$i.err"
    rb=$?
    if [ "$ra" = "$rb" ] && cmp -s "$d/a$i.json" "$d/b$i.json" && cmp -s "$d/a$i.err" "$d/b$i.err"; then
        echo "same  exit $ra, $(wc -c < "$d/a$i.json") bytes: ${w[$i]}"
    else
        echo "DIFF  exit $ra / $rb: ${w[$i]}"
        bad=1
    fi
done
exit $bad

//! The temporary storage CUB device algorithms ask the caching allocator for.
//!
//! PyTorch calls CUB through `CUB_WRAPPER` (`aten/src/ATen/cuda/cub.cuh`):
//! the algorithm is called once with a null buffer to learn
//! `temp_storage_bytes`, that many bytes are allocated from the caching
//! allocator, the algorithm runs, and the buffer is freed at the end of the
//! wrapper. The sizes below are CUB's own computation of
//! `temp_storage_bytes`, from CCCL 3.0 (the CUB of CUDA 13.0, which
//! PyTorch 2.11.0+cu130 builds with; `cub/device/dispatch/*.cuh` are the
//! same in 3.0.0 through 3.0.3), with the sm_90 tuning policies
//! (`Policy900`). Checked against the H100 trace of
//! `llama_train_bf16_ckpt` (4096 int64 indices): 83,455 bytes for the radix
//! sort, 1,279 for the unique-by-key and 1,279 for the exclusive sum.

use crate::error::{EngineError, Result};

/// `detail::AliasTemporaries` (`cub/util_temporary_storage.cuh`): every
/// allocation rounded up to 256 bytes, plus 255 bytes of slack to align the
/// blob itself.
pub(crate) fn alias_temporaries(sizes: &[u64]) -> u64 {
    const ALIGN: u64 = 256;
    sizes.iter().map(|s| s.div_ceil(ALIGN) * ALIGN).sum::<u64>() + ALIGN - 1
}

/// `ScanTileState<T>::AllocationSize(num_tiles)`
/// (`cub/agent/single_pass_scan_operators.cuh`), itself aliased, for `T` of
/// `t_bytes`: a primitive `T` (4 or 8 bytes) keeps `warp_threads (32) +
/// num_tiles` descriptors of `sizeof(TxnWord)` (16 bytes for an 8-byte `T`,
/// 8 for 4); a class type (`c10::Half`, `c10::BFloat16`: the 2-byte `T` that
/// reach CUB) keeps three arrays of that length: 4-byte status words, partial
/// and inclusive values (the 2-byte layout fits every bf16 `cumsum` of the
/// H200 sweep, `fixtures/run/sweeps/scratch_sweep_h200.jsonl`).
fn scan_tile_state_bytes(num_tiles: u64, t_bytes: u64) -> u64 {
    let len = 32 + num_tiles;
    match t_bytes {
        8 => alias_temporaries(&[len * 16, 0, 0]),
        4 => alias_temporaries(&[len * 8, 0, 0]),
        _ => alias_temporaries(&[len * 4, len * t_bytes, len * t_bytes]),
    }
}

/// `RegBoundScaling<threads, items, T>` (`cub/util_arch.cuh`): items per
/// thread scaled to the element size, threads capped so a block's tile fits
/// in 48 KiB of shared memory. Returns the tile size.
fn reg_bound_tile(threads: u64, items: u64, t_bytes: u64) -> u64 {
    let items = (items * 4 / t_bytes.max(4)).max(1);
    let threads = threads.min((48 * 1024 / (t_bytes * items)).div_ceil(32) * 32);
    threads * items
}

/// `MemBoundScaling<threads, items, T>` (`cub/util_arch.cuh`), as a tile size.
fn mem_bound_tile(threads: u64, items: u64, t_bytes: u64) -> u64 {
    let items = (items * 4 / t_bytes).min(items * 2).max(1);
    let threads = threads.min((48 * 1024 / (t_bytes * items)).div_ceil(32) * 32);
    threads * items
}

fn sm90_only(capability: (u32, u32), what: &str) -> Result<()> {
    if capability.0 == 9 {
        Ok(())
    } else {
        Err(EngineError::Unsupported {
            what: format!(
                "CUB temporary storage of {what} on compute capability {}.{} (only the sm_90 policies are modelled)",
                capability.0, capability.1
            ),
        })
    }
}

fn int_bytes(what: &str, bytes: u64) -> Result<()> {
    if bytes == 4 || bytes == 8 {
        Ok(())
    } else {
        Err(EngineError::Unsupported {
            what: format!("CUB temporary storage of {what} for {bytes}-byte elements"),
        })
    }
}

/// `cuda::cub::radix_sort_pairs(keys, ..., values, ..., n, descending,
/// begin_bit = 0, end_bit)` (`value_bytes` 0: `radix_sort_keys`) with an `int64_t` item count (so CUB's `OffsetT`
/// is 64-bit): `DispatchRadixSort::Invoke`. Up to the single-tile policy's
/// tile (`256 x 19` nominal, `RegBoundScaling` on the larger of key and
/// value) CUB needs no storage but asks for 1 byte; beyond, `InvokeOnesweep`
/// (sm_90 always uses onesweep): the bins (`portions * passes * 256`
/// offsets, a pass per 8 bits up to `end_bit`), the lookback (`blocks * 256`
/// ints), the alternate key and value buffers (more than one pass) and the
/// counters (`portions * passes` ints), aliased. The onesweep tile
/// (`tuning_radix_sort.cuh`): `384 x 24` (`OnesweepPolicyKey64`, 8-byte
/// values) or `384 x 30` (smaller values) for 8-byte keys, `384 x 29` or
/// `384 x 17` (`OnesweepPolicyKey32`, 64-bit offsets) for 4-byte keys, and
/// `sm90_small_key_tuning<key, value, 8>` for 1- and 2-byte keys.
/// `value_bytes` 0 is `radix_sort_keys` (no values).
pub(crate) fn radix_sort_pairs_bytes(
    capability: (u32, u32),
    n: u64,
    key_bytes: u64,
    value_bytes: u64,
    end_bit: u64,
) -> Result<u64> {
    sm90_only(capability, "radix_sort_pairs")?;
    if !matches!(key_bytes, 1 | 2 | 4 | 8) || end_bit > 8 * key_bytes {
        return Err(EngineError::Unsupported {
            what: format!(
                "CUB temporary storage of radix_sort_pairs for {key_bytes}-byte keys sorted on {end_bit} bits"
            ),
        });
    }
    if !matches!(value_bytes, 0 | 4 | 8) {
        return Err(EngineError::Unsupported {
            what: format!(
                "CUB temporary storage of radix_sort_pairs for {value_bytes}-byte values"
            ),
        });
    }
    if n == 0 {
        return Ok(1);
    }
    let dominant = key_bytes.max(value_bytes);
    if n <= reg_bound_tile(256, 19, dominant) {
        return Ok(1);
    }
    let (threads, nominal_items) = match (key_bytes, value_bytes) {
        (8, 8) => (384, 24),
        (8, _) => (384, 30),
        (4, 8) => (384, 29),
        (4, _) => (384, 17),
        // sm90_small_key_tuning<1|2, 0|4|8, 8>
        (1 | 2, 0) => (512, 19),
        (1, 8) => (384, 18),
        (1, _) => (512, 14),
        (_, 8) => (512, 23),
        _ => (512, 12),
    };
    let tile = reg_bound_tile(threads, nominal_items, dominant);
    let portion = ((1u64 << 28) - 1) / tile * tile;
    let passes = end_bit.div_ceil(8);
    let portions = n.div_ceil(portion);
    let blocks = n.min(portion).div_ceil(tile);
    let (alt_keys, alt_values) = if passes > 1 {
        (n * key_bytes, n * value_bytes)
    } else {
        (0, 0)
    };
    Ok(alias_temporaries(&[
        portions * passes * 256 * 8,
        blocks * 256 * 4,
        alt_keys,
        alt_values,
        portions * passes * 4,
    ]))
}

/// `cuda::cub::unique_by_key(keys, counting_iterator<int>, values_out,
/// num_selected, n)` with an `int64_t` count (64-bit `OffsetT`):
/// `DispatchUniqueByKey` allocates the `ScanTileState<OffsetT>` of its tiles
/// and no virtual shared memory. The sm_90 tiles (`tuning_unique_by_key.cuh`,
/// 4-byte values): `640 x 7` for 8-byte keys, `512 x 14` for 4-byte keys.
pub(crate) fn unique_by_key_bytes(capability: (u32, u32), n: u64, key_bytes: u64) -> Result<u64> {
    sm90_only(capability, "unique_by_key")?;
    int_bytes("unique_by_key", key_bytes)?;
    let tile = if key_bytes == 8 { 640 * 7 } else { 512 * 14 };
    let tiles = n.div_ceil(tile);
    Ok(alias_temporaries(&[scan_tile_state_bytes(tiles, 8), 0]))
}

/// `cuda::cub::exclusive_sum(in, out, n)` over integers of `t_bytes`:
/// `DispatchScan` allocates the `ScanTileState<AccumT>` of its tiles, with
/// the default policy's tile as [`inclusive_scan_bytes`] (the sm_90 tunings
/// do not take PyTorch's functor): the H200 sweep's
/// `embedding_dense_backward` scans `min(indices, rows)` items, 24,576 to
/// 50,265, in 896-item tiles (`fixtures/run/sweeps/scratch_sweep_h200.jsonl`).
pub(crate) fn exclusive_sum_bytes(capability: (u32, u32), n: u64, t_bytes: u64) -> Result<u64> {
    sm90_only(capability, "exclusive_sum")?;
    int_bytes("exclusive_sum", t_bytes)?;
    let tiles = n.div_ceil(mem_bound_tile(128, 15, t_bytes));
    Ok(alias_temporaries(&[scan_tile_state_bytes(tiles, t_bytes)]))
}

/// `cuda::cub::inclusive_scan(in, out, std::plus<T>(), n)` (`scan_dim` of
/// `ScanUtils.cuh` for a tensor whose numel is the scanned dim's size:
/// `cumsum` of a 1-D tensor or a batch of one): `DispatchScan` allocates the
/// `ScanTileState<T>` of its tiles, like [`exclusive_sum_bytes`], but with
/// PyTorch's `std::plus` functor, which CUB's sm_90 tunings do not take (they
/// are for `cuda::std::plus` on primitive types), so the tile is the default
/// policy's (`tuning_scan.cuh`: `Policy900` falls back to `DefaultPolicy`,
/// `AgentScanPolicy<128, 15, AccumT, ...>`, whose items scale by
/// `MemBoundScaling`): 7 x 128 = 896 for 8-byte `T`, 15 x 128 = 1920 for
/// 4-byte, 30 x 128 = 3840 for the 2-byte floating types. Measured on the
/// H100 (`validation/cub_scan.py`, `fixtures/ops/cub_scan_h100.jsonl`) and
/// the H200 (`validation/run/sweeps/scratch_sweep.py`).
pub(crate) fn inclusive_scan_bytes(capability: (u32, u32), n: u64, t_bytes: u64) -> Result<u64> {
    sm90_only(capability, "inclusive_scan")?;
    if !matches!(t_bytes, 2 | 4 | 8) {
        return Err(EngineError::Unsupported {
            what: format!("CUB temporary storage of inclusive_scan for {t_bytes}-byte elements"),
        });
    }
    let tiles = n.div_ceil(mem_bound_tile(128, 15, t_bytes));
    Ok(alias_temporaries(&[scan_tile_state_bytes(tiles, t_bytes)]))
}

/// `cub::DeviceReduce::Sum` of `n` items into an `int` (`nonzero`'s count,
/// `cuda/Nonzero.cu`): up to the single-tile policy's tile (256 x 16) CUB asks
/// for 1 byte; beyond, `InvokePasses` keeps one `int` per block of its
/// even-share grid, `sm_occupancy * sm_count * CUB_SUBSCRIPTION_FACTOR (5)`
/// blocks, aliased (`dispatch_reduce.cuh`). The reduce kernel's occupancy,
/// 8 blocks per SM, is measured: 21,503 bytes on the 132-SM H200 for every
/// `n` past 4,096 (`fixtures/run/sweeps/select_sweep_h200.jsonl`).
pub(crate) fn reduce_count_bytes(capability: (u32, u32), sm_count: u32, n: u64) -> Result<u64> {
    sm90_only(capability, "DeviceReduce::Sum")?;
    const OCCUPANCY: u64 = 8;
    const SUBSCRIPTION: u64 = 5;
    if n <= 256 * 16 {
        return Ok(1);
    }
    let blocks = OCCUPANCY * u64::from(sm_count) * SUBSCRIPTION;
    Ok(alias_temporaries(&[blocks * 4]))
}

/// `cub::DeviceSelect::Flagged` of `n` items selected by position
/// (`nonzero`, `cuda/Nonzero.cu`) or `cub::DeviceSelect::Unique` of `n`
/// keys of `key_bytes` (`unique`, `cuda/UniqueCub.cu`): the `ScanTileState`
/// of its tiles' 8-byte offsets, aliased once. The tile, 384 threads of 22
/// items for 8-byte items and 34 for 4-byte ones, is measured: the only
/// one that gives the H200's bytes at every size swept, 1 to 16,777,216
/// (`fixtures/run/sweeps/select_sweep_h200.jsonl`, `unique_probe_h200.jsonl`).
pub(crate) fn select_bytes(capability: (u32, u32), n: u64, key_bytes: u64) -> Result<u64> {
    sm90_only(capability, "DeviceSelect")?;
    int_bytes("DeviceSelect", key_bytes)?;
    let tile = 384 * if key_bytes == 8 { 22 } else { 34 };
    let tiles = n.div_ceil(tile).max(1);
    Ok(alias_temporaries(&[(32 + tiles) * 16]))
}

/// `cuda::cub::inclusive_sum_truncating` of `n` ints into int64
/// (`unique`'s inverse, `cuda/UniqueCub.cu`): the `ScanTileState` of its
/// tiles' 8-byte sums, aliased once, over 6,144-item tiles. Measured: the
/// only tile that gives the H200's bytes at all 15 sizes of
/// `fixtures/run/sweeps/unique_probe_h200.jsonl`.
pub(crate) fn inclusive_sum_truncating_bytes(capability: (u32, u32), n: u64) -> Result<u64> {
    sm90_only(capability, "inclusive_sum_truncating")?;
    const TILE: u64 = 6144;
    let tiles = n.div_ceil(TILE).max(1);
    Ok(alias_temporaries(&[(32 + tiles) * 16]))
}

/// `cub::DeviceRunLengthEncode::Encode` of `n` items (`unique` with
/// counts, `cuda/UniqueCub.cu`): the `ScanTileState` of its tiles'
/// 16-byte (offset, length) descriptors, aliased once, over 768-item
/// tiles. Measured: the only tile that gives the H200's bytes at the
/// sweep's three sizes, 1,000, 65,536 and 1,048,576
/// (`fixtures/run/sweeps/select_sweep_h200.jsonl`).
pub(crate) fn run_length_encode_bytes(capability: (u32, u32), n: u64) -> Result<u64> {
    sm90_only(capability, "DeviceRunLengthEncode::Encode")?;
    const TILE: u64 = 768;
    let tiles = n.div_ceil(TILE).max(1);
    Ok(alias_temporaries(&[(32 + tiles) * 16]))
}

/// `cuda::cub::inclusive_sum_by_key` of `n` `uint32` counts keyed by
/// `uint32` slice indices (`topk`'s two scans, `cuda/TensorTopK.cu`):
/// `DispatchScanByKey` aliases the `ReduceByKeyScanTileState` of its tiles
/// (16-byte descriptors) and the `num_tiles + 1` keys that end them
/// (`dispatch_scan_by_key.cuh`); the tile is `sm90_tuning` for 4-byte keys
/// and values, 288 threads of 14 items (`tuning_scan_by_key.cuh`). Every
/// size of the H200 sweep, 20 to 1,048,576 items, agrees
/// (`fixtures/run/sweeps/topk_isin_h200.jsonl`).
pub(crate) fn scan_by_key_bytes(capability: (u32, u32), n: u64) -> Result<u64> {
    sm90_only(capability, "inclusive_sum_by_key")?;
    const TILE: u64 = 288 * 14;
    let tiles = n.div_ceil(TILE).max(1);
    Ok(alias_temporaries(&[(32 + tiles) * 16, 4 * (tiles + 1)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: (u32, u32) = (9, 0);

    /// Every size `validation/cub_scan.py` measured on the H100: int64
    /// (int32 is scanned as int64, the dtype `cumsum` promotes it to) and
    /// float32.
    #[test]
    fn inclusive_scan_as_measured() {
        let text = include_str!("../../../../fixtures/ops/cub_scan_h100.jsonl");
        let mut checked = 0;
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let Some(n) = v["n"].as_u64() else { continue };
            let t_bytes = match v["out_dtype"].as_str().unwrap() {
                "int64" => 8,
                "float32" => 4,
                other => panic!("{other}"),
            };
            let out = n * t_bytes;
            // the output, any int64 copy of an int32 input, then CUB's
            let allocs: Vec<u64> = v["allocs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_u64().unwrap())
                .collect();
            let cub = *allocs.last().unwrap();
            assert!(
                allocs[..allocs.len() - 1].iter().all(|&a| a == out),
                "{line}"
            );
            assert_eq!(
                inclusive_scan_bytes(H100, n, t_bytes).unwrap(),
                cub,
                "{line}"
            );
            checked += 1;
        }
        assert_eq!(checked, 3 * 122);
    }

    /// A sweep line's case name and the sizes its memory history listed.
    fn case_and_sizes(line: &str) -> (String, Vec<u64>) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let sizes = v["sizes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_u64().unwrap())
            .collect();
        (v["case"].as_str().unwrap().to_owned(), sizes)
    }

    /// Every `nonzero` of the H200's selection sweep: its count (4 bytes),
    /// the reduce's storage, the positions, the select's storage.
    #[test]
    fn nonzero_as_measured() {
        const H200: (u32, u32) = (9, 0);
        let text = include_str!("../../../../fixtures/run/sweeps/select_sweep_h200.jsonl");
        let mut checked = 0;
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let case = v["case"].as_str().unwrap();
            if !case.starts_with("nonzero ") {
                continue;
            }
            let sizes: Vec<u64> = v["sizes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_u64().unwrap())
                .collect();
            // "nonzero DTYPE N" or "nonzero DTYPE (A, B, ...)": the input's elements
            let shape = case.splitn(3, ' ').nth(2).unwrap();
            let dims: Vec<u64> = shape
                .trim_matches(|c| c == '(' || c == ')')
                .split(',')
                .map(|d| d.trim().parse().unwrap())
                .collect();
            let n: u64 = dims.iter().product();
            assert_eq!(sizes.len(), 4, "{line}");
            assert_eq!(sizes[0], 4, "{line}");
            assert_eq!(
                reduce_count_bytes(H200, 132, n).unwrap(),
                sizes[1],
                "{line}"
            );
            assert_eq!(select_bytes(H200, n, 8).unwrap(), sizes[3], "{line}");
            checked += 1;
        }
        assert_eq!(checked, 4 * 11 + 3);
    }

    /// `unique(return_counts=True)`'s run-length encoding and `unique`'s
    /// selection in the H200's selection sweep (int64 inputs).
    #[test]
    fn unique_as_measured() {
        const H200: (u32, u32) = (9, 0);
        let text = include_str!("../../../../fixtures/run/sweeps/select_sweep_h200.jsonl");
        let mut checked = 0;
        for line in text.lines() {
            let (case, sizes) = case_and_sizes(line);
            let case = case.as_str();
            let n: u64 = case.rsplit(' ').next().unwrap().parse().unwrap_or(0);
            if case.starts_with("unique inverse counts") {
                assert_eq!(
                    run_length_encode_bytes(H200, n).unwrap(),
                    sizes[10],
                    "{line}"
                );
                assert_eq!(
                    radix_sort_pairs_bytes(H200, n, 8, 8, 64).unwrap(),
                    sizes[3],
                    "{line}"
                );
                checked += 1;
            } else if case.starts_with("unique sorted") {
                assert_eq!(select_bytes(H200, n, 8).unwrap(), sizes[4], "{line}");
                assert_eq!(
                    radix_sort_pairs_bytes(H200, n, 8, 0, 64).unwrap(),
                    sizes[1],
                    "{line}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 6);
    }

    /// `unique(return_inverse=True)` of int64 and int32 inputs at 15 sizes:
    /// the radix sort of keys and indices, the inverse's scan, the
    /// selection.
    #[test]
    fn unique_inverse_as_measured() {
        const H200: (u32, u32) = (9, 0);
        let text = include_str!("../../../../fixtures/run/sweeps/unique_probe_h200.jsonl");
        let mut checked = 0;
        for line in text.lines() {
            let (case, sizes) = case_and_sizes(line);
            let case = case.as_str();
            let n: u64 = case.rsplit(' ').next().unwrap().parse().unwrap();
            let key = if case.contains("int64") { 8 } else { 4 };
            assert_eq!(
                radix_sort_pairs_bytes(H200, n, key, 8, 8 * key).unwrap(),
                sizes[3],
                "{line}"
            );
            assert_eq!(
                inclusive_sum_truncating_bytes(H200, n).unwrap(),
                sizes[6],
                "{line}"
            );
            assert_eq!(select_bytes(H200, n, key).unwrap(), sizes[9], "{line}");
            checked += 1;
        }
        assert_eq!(checked, 30);
    }

    /// Every CUB buffer of the H200 sweep (`validation/run/sweeps/scratch_sweep.py`):
    /// `cumsum` scans, 1-D `sort` and `index_put_(accumulate=True)` radix sorts,
    /// and `embedding_dense_backward`'s sort, unique-by-key and exclusive sum.
    #[test]
    fn the_h200_sweep() {
        const H200: (u32, u32) = (9, 0);
        let text = include_str!("../../../../fixtures/run/sweeps/scratch_sweep_h200.jsonl");
        let bytes_of = |dt: &str| match dt {
            "int64" | "int32" | "bool" => 8,
            "float32" => 4,
            "bfloat16" => 2,
            other => panic!("{other}"),
        };
        let mut checked = 0;
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let case: Vec<&str> = v["case"].as_str().unwrap().split(' ').collect();
            let sizes: Vec<u64> = v["sizes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_u64().unwrap())
                .collect();
            let num = |s: &str| s.parse::<u64>().unwrap();
            let (got, want) = match case.as_slice() {
                ["cumsum", dt, n] => (
                    *sizes.last().unwrap(),
                    inclusive_scan_bytes(H200, num(n), bytes_of(dt)).unwrap(),
                ),
                ["sort", dt, n] | ["sort", "stable", dt, n] if num(n) > 4096 => {
                    let key = if *dt == "int32" { 4 } else { bytes_of(dt) };
                    (
                        *sizes.last().unwrap(),
                        radix_sort_pairs_bytes(H200, num(n), key, 8, 8 * key).unwrap(),
                    )
                }
                // 65,536 rows: `get_num_bits(65535)` = 16 bits
                ["index_put_", "acc", n, _] => (
                    *sizes.last().unwrap(),
                    radix_sort_pairs_bytes(H200, num(n), 8, 8, 16).unwrap(),
                ),
                ["embedding_dense_backward", n, vocab, _] => {
                    let (n, vocab) = (num(n), num(vocab));
                    assert_eq!(
                        sizes[3],
                        radix_sort_pairs_bytes(H200, n, 8, 8, 64).unwrap(),
                        "{line}"
                    );
                    assert_eq!(sizes[8], unique_by_key_bytes(H200, n, 8).unwrap(), "{line}");
                    (
                        sizes[11],
                        exclusive_sum_bytes(H200, n.min(vocab), 8).unwrap(),
                    )
                }
                _ => continue,
            };
            assert_eq!(got, want, "{line}");
            checked += 1;
        }
        assert_eq!(checked, 70 + 72 + 10 + 24);
    }

    /// `topk`'s multi-block path: the within-k counts (4 bytes a block) are
    /// the eighth allocation, then the two scans by key over the blocks.
    #[test]
    fn topk_scans_as_measured() {
        const H200: (u32, u32) = (9, 0);
        let text = include_str!("../../../../fixtures/run/sweeps/topk_isin_h200.jsonl");
        let mut checked = 0;
        for line in text.lines().filter(|l| l.contains("\"topk ")) {
            let (_, sizes) = case_and_sizes(line);
            let blocks = sizes[7] / 4;
            assert_eq!(sizes[9], sizes[10], "{line}");
            assert_eq!(sizes[9], scan_by_key_bytes(H200, blocks).unwrap(), "{line}");
            checked += 1;
        }
        assert_eq!(checked, 27);
        assert_eq!(scan_by_key_bytes(H200, 64_512).unwrap(), 1279);
        assert_eq!(scan_by_key_bytes(H200, 64_513).unwrap(), 1535);
    }

    #[test]
    fn measured_on_the_h100() {
        // llama_train_bf16_ckpt: embedding_dense_backward of 4096 int64 indices
        assert_eq!(
            radix_sort_pairs_bytes(H100, 4096, 8, 8, 64).unwrap(),
            83_455
        );
        assert_eq!(unique_by_key_bytes(H100, 4096, 8).unwrap(), 1_279);
        assert_eq!(exclusive_sum_bytes(H100, 4096, 8).unwrap(), 1_279);
    }

    #[test]
    fn policies_follow_the_sources() {
        // onesweep Key64/8-byte values: 12 items x 384 threads = 4608 a tile
        assert_eq!(reg_bound_tile(384, 24, 8), 4608);
        // the single-tile policy: 9 x 256 for 8-byte keys, 19 x 256 for 4-byte
        assert_eq!(reg_bound_tile(256, 19, 8), 2304);
        assert_eq!(reg_bound_tile(256, 19, 4), 4864);
        assert_eq!(radix_sort_pairs_bytes(H100, 2304, 8, 8, 64).unwrap(), 1);
        // scan, 8-byte accumulators: 12 x 224
        assert_eq!(mem_bound_tile(224, 24, 8), 2688);
        // a second lookback block past one onesweep tile
        assert_eq!(
            radix_sort_pairs_bytes(H100, 4609, 8, 8, 64).unwrap()
                - radix_sort_pairs_bytes(H100, 4608, 8, 8, 64).unwrap(),
            1024 + 2 * (4609 * 8u64).div_ceil(256) * 256 - 2 * 4608 * 8
        );
    }

    #[test]
    fn other_devices_are_not_guessed() {
        assert!(radix_sort_pairs_bytes((8, 0), 4096, 8, 8, 64).is_err());
        assert!(exclusive_sum_bytes(H100, 4096, 2).is_err());
    }
}

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

/// `ScanTileState<T, true>::AllocationSize(num_tiles)`
/// (`cub/agent/single_pass_scan_operators.cuh`) for a primitive `T` of
/// `t_bytes`: `detail::tile_state_allocation_size` of `warp_threads (32) +
/// num_tiles` descriptors of `sizeof(TxnWord)` (16 bytes for an 8-byte `T`,
/// 8 for 4, else 4) and no payload, itself aliased.
fn scan_tile_state_bytes(num_tiles: u64, t_bytes: u64) -> u64 {
    let txn = match t_bytes {
        8 => 16,
        4 => 8,
        _ => 4,
    };
    alias_temporaries(&[(32 + num_tiles) * txn, 0, 0])
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

/// `cuda::cub::radix_sort_pairs(keys, ..., values, ..., n)` with the full key
/// width (`begin_bit = 0, end_bit = 8 * sizeof(key)`) and an `int64_t` item
/// count (so CUB's `OffsetT` is 64-bit): `DispatchRadixSort::Invoke`. Up to
/// the single-tile policy's tile (`256 x 19` nominal, `RegBoundScaling` on
/// the larger of key and value) CUB needs no storage but asks for 1 byte;
/// beyond, `InvokeOnesweep` (sm_90 always uses onesweep): the bins
/// (`portions * passes * 256` offsets), the lookback (`blocks * 256` ints),
/// the alternate key and value buffers and the counters
/// (`portions * passes` ints), aliased. The onesweep tile is `384 x 24`
/// (`OnesweepPolicyKey64`, 8-byte values) or `384 x 30` (smaller values) for
/// 8-byte keys, `384 x 29` or `384 x 17` (`OnesweepPolicyKey32`, 64-bit
/// offsets) for 4-byte keys (`tuning_radix_sort.cuh`,
/// `OnesweepSmallKeyTunedPolicy`).
pub(crate) fn radix_sort_pairs_bytes(
    capability: (u32, u32),
    n: u64,
    key_bytes: u64,
    value_bytes: u64,
) -> Result<u64> {
    sm90_only(capability, "radix_sort_pairs")?;
    int_bytes("radix_sort_pairs", key_bytes)?;
    int_bytes("radix_sort_pairs", value_bytes)?;
    if n == 0 {
        return Ok(1);
    }
    let dominant = key_bytes.max(value_bytes);
    if n <= reg_bound_tile(256, 19, dominant) {
        return Ok(1);
    }
    let nominal_items = match (key_bytes, value_bytes) {
        (8, 8) => 24,
        (8, _) => 30,
        (_, 8) => 29,
        _ => 17,
    };
    let tile = reg_bound_tile(384, nominal_items, dominant);
    let portion = ((1u64 << 28) - 1) / tile * tile;
    let passes = (8 * key_bytes).div_ceil(8);
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

/// `cuda::cub::exclusive_sum(in, out, n)` over integers of `t_bytes` (a
/// primitive `::cuda::std::plus`): `DispatchScan` allocates the
/// `ScanTileState<AccumT>` of its tiles. The sm_90 tile
/// (`tuning_scan.cuh`, `sm90_tuning` with `MemBoundScaling`): `224 x 24`
/// nominal for 8-byte, `128 x 24` for 4-byte accumulators.
pub(crate) fn exclusive_sum_bytes(capability: (u32, u32), n: u64, t_bytes: u64) -> Result<u64> {
    sm90_only(capability, "exclusive_sum")?;
    int_bytes("exclusive_sum", t_bytes)?;
    let tile = if t_bytes == 8 {
        mem_bound_tile(224, 24, 8)
    } else {
        mem_bound_tile(128, 24, 4)
    };
    let tiles = n.div_ceil(tile);
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
/// 4-byte. Measured on the H100
/// (`validation/cub_scan.py`, `fixtures/ops/cub_scan_h100.jsonl`): 1,279 bytes
/// up to 12,288 int64 items, 300,799 at 16,777,216; the test below checks
/// every measured size. Floating `T` of other sizes (bf16, fp16) were not
/// measured: an error.
pub(crate) fn inclusive_scan_bytes(capability: (u32, u32), n: u64, t_bytes: u64) -> Result<u64> {
    sm90_only(capability, "inclusive_scan")?;
    int_bytes("inclusive_scan", t_bytes)?;
    let tiles = n.div_ceil(mem_bound_tile(128, 15, t_bytes));
    Ok(alias_temporaries(&[scan_tile_state_bytes(tiles, t_bytes)]))
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

    #[test]
    fn measured_on_the_h100() {
        // llama_train_bf16_ckpt: embedding_dense_backward of 4096 int64 indices
        assert_eq!(radix_sort_pairs_bytes(H100, 4096, 8, 8).unwrap(), 83_455);
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
        assert_eq!(radix_sort_pairs_bytes(H100, 2304, 8, 8).unwrap(), 1);
        // scan, 8-byte accumulators: 12 x 224
        assert_eq!(mem_bound_tile(224, 24, 8), 2688);
        // a second lookback block past one onesweep tile
        assert_eq!(
            radix_sort_pairs_bytes(H100, 4609, 8, 8).unwrap()
                - radix_sort_pairs_bytes(H100, 4608, 8, 8).unwrap(),
            1024 + 2 * (4609 * 8u64).div_ceil(256) * 256 - 2 * 4608 * 8
        );
    }

    #[test]
    fn other_devices_are_not_guessed() {
        assert!(radix_sort_pairs_bytes((8, 0), 4096, 8, 8).is_err());
        assert!(exclusive_sum_bytes(H100, 4096, 2).is_err());
    }
}

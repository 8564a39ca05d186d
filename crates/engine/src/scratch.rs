//! How a library sizes its scratch memory, kept with the allocation so a
//! caller can size the same scratch at other shapes without running the
//! model again (the sweeps of `vramscope plan`).
//!
//! A tensor's bytes are a product of its dimensions; a library's scratch is
//! not (CUB's temporary storage follows its tiles, a split reduction's
//! buffer its launch configuration). The eager twin records, for each such
//! allocation, the rule and its integer inputs: [`ScratchRule::bytes`] gives
//! the same bytes the twin allocated, from the same functions.

use crate::error::Result;
use crate::ops::{cub, reduce};
use crate::runtime::DeviceProfile;

/// A kernel that takes one path up to a count and another above it
/// (`embedding_dense_backward`: at most 3072 indices, or the sorting path),
/// so that the allocations it makes change with the count, not only their
/// sizes. The eager twin notes each one it meets with the count it saw; a
/// caller that has run the model at two batch sizes can tell from the
/// counts where, between them, the path changes (the sweeps' search for the
/// batch sizes at which the requests change structure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathSwitch {
    /// the count the kernel compares
    pub count: i64,
    /// the largest count of the first path
    pub threshold: i64,
}

impl PathSwitch {
    /// Whether the count is past the threshold (the second path).
    pub fn above(&self) -> bool {
        self.count > self.threshold
    }
}

/// The rule and inputs of one scratch allocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ScratchRule {
    /// `cub::DeviceRadixSort::SortPairs` over `n` items
    RadixSortPairs {
        /// items
        n: i64,
        /// key bytes
        key_bytes: u64,
        /// value bytes
        value_bytes: u64,
        /// the bits sorted on (`end_bit`; `8 * key_bytes` for a full sort)
        end_bit: u64,
    },
    /// `cub::DeviceScan::InclusiveScan` over `n` items of `t_bytes`
    InclusiveScan {
        /// items
        n: i64,
        /// element bytes
        t_bytes: u64,
    },
    /// `cub::DeviceReduce::Sum` counting `n` items (`nonzero`)
    ReduceCount {
        /// items
        n: i64,
    },
    /// `cub::DeviceSelect::Flagged` (`nonzero`) or `Unique` (`unique`)
    /// over `n` items
    Select {
        /// items
        n: i64,
        /// item bytes (8 for `nonzero`'s positions)
        key_bytes: u64,
    },
    /// `cuda::cub::inclusive_sum_truncating` of `n` ints (`unique`'s
    /// inverse)
    SumTruncating {
        /// items
        n: i64,
    },
    /// `cuda::cub::inclusive_sum_by_key` of `n` 4-byte counts keyed by 4-byte
    /// slice indices (`topk`'s block offsets)
    ScanByKey {
        /// items
        n: i64,
    },
    /// `cub::DeviceRunLengthEncode::Encode` over `n` items (`unique` with
    /// counts)
    RunLengthEncode {
        /// items
        n: i64,
    },
    /// `cub::DeviceSelect::UniqueByKey` over `n` items
    UniqueByKey {
        /// items
        n: i64,
        /// key bytes
        key_bytes: u64,
    },
    /// `_cudnn_attention_backward`'s workspace
    CudnnAttentionBackward {
        /// batch
        b: i64,
        /// query heads
        h: i64,
        /// key heads
        h_k: i64,
        /// query length
        s_q: i64,
        /// key length
        s_kv: i64,
        /// head dim of q and k
        d_qk: i64,
    },
    /// `_efficient_attention_backward`'s workspace
    EfficientAttentionBackward {
        /// the inputs' dtype
        dtype: crate::DType,
        /// batch, heads, query length, key length, head dims of q/k and v
        dims: [i64; 6],
    },
    /// a buffer of `embedding_backward_cuda_kernel` sized by the segments
    /// of its sorted indices (a tensor, but not a product of the input's
    /// dimensions)
    EmbeddingSegments {
        /// the kernel's sizes
        problem: crate::ops::nn::SegmentProblem,
        /// which buffer
        buffer: crate::ops::nn::SegmentBuffer,
    },
    /// part of a reduction's scratch: of the `index`-th 32-bit launch, the
    /// global buffer (`semaphores == false`) or the semaphores
    Reduce {
        /// the input's sizes (elements)
        sizes: Vec<i64>,
        /// the input's strides (elements)
        strides: Vec<i64>,
        /// the reduced dims
        reduced: Vec<bool>,
        /// element bytes
        elem: i64,
        /// accumulator bytes
        acc: i64,
        /// which launch
        index: usize,
        /// the semaphores rather than the buffer
        semaphores: bool,
    },
}

impl ScratchRule {
    /// The bytes it allocates on `profile`'s GPU (`None`: the rule does not
    /// apply there, e.g. a reduction split differently).
    pub fn bytes(&self, profile: &DeviceProfile) -> Option<u64> {
        let cap = profile.cub_policies;
        let r: Result<u64> = match self {
            ScratchRule::RadixSortPairs {
                n,
                key_bytes,
                value_bytes,
                end_bit,
            } => cub::radix_sort_pairs_bytes(
                cap,
                u64::try_from(*n).ok()?,
                *key_bytes,
                *value_bytes,
                *end_bit,
            ),
            ScratchRule::UniqueByKey { n, key_bytes } => {
                cub::unique_by_key_bytes(cap, u64::try_from(*n).ok()?, *key_bytes)
            }
            ScratchRule::ReduceCount { n } => {
                cub::reduce_count_bytes(cap, profile.sm_count, u64::try_from(*n).ok()?)
            }
            ScratchRule::Select { n, key_bytes } => {
                cub::select_bytes(cap, u64::try_from(*n).ok()?, *key_bytes)
            }
            ScratchRule::SumTruncating { n } => {
                cub::inclusive_sum_truncating_bytes(cap, u64::try_from(*n).ok()?)
            }
            ScratchRule::RunLengthEncode { n } => {
                cub::run_length_encode_bytes(cap, u64::try_from(*n).ok()?)
            }
            ScratchRule::ScanByKey { n } => cub::scan_by_key_bytes(cap, u64::try_from(*n).ok()?),
            ScratchRule::InclusiveScan { n, t_bytes } => {
                cub::inclusive_scan_bytes(cap, u64::try_from(*n).ok()?, *t_bytes)
            }
            ScratchRule::CudnnAttentionBackward {
                b,
                h,
                h_k,
                s_q,
                s_kv,
                d_qk,
            } => Ok(crate::ops::attention::cudnn_bwd_workspace(
                *b, *h, *h_k, *s_q, *s_kv, *d_qk,
            )),
            ScratchRule::EfficientAttentionBackward { dtype, dims } => {
                let [b, h, m, n, k, kv] = *dims;
                Ok(crate::ops::attention::efficient_bwd_workspace(
                    *dtype,
                    crate::ops::attention::EffProblem { b, h, m, n, k, kv },
                ))
            }
            ScratchRule::EmbeddingSegments { problem, buffer } => {
                return problem.bytes(*buffer, profile);
            }
            ScratchRule::Reduce {
                sizes,
                strides,
                reduced,
                elem,
                acc,
                index,
                semaphores,
            } => {
                if sizes.len() != strides.len() || sizes.len() != reduced.len() {
                    return None;
                }
                let sc = reduce::reduce_scratch_of(sizes, strides, reduced, *elem, *acc, profile);
                let s = sc.get(*index)?;
                Ok(if *semaphores { s.semaphores } else { s.buffer })
            }
        };
        r.ok()
    }

    /// The integer inputs that follow the shapes (item counts, sizes,
    /// strides), in a fixed order.
    pub fn inputs(&self) -> Vec<i64> {
        match self {
            ScratchRule::RadixSortPairs { n, .. }
            | ScratchRule::UniqueByKey { n, .. }
            | ScratchRule::ReduceCount { n }
            | ScratchRule::Select { n, .. }
            | ScratchRule::SumTruncating { n }
            | ScratchRule::RunLengthEncode { n }
            | ScratchRule::ScanByKey { n }
            | ScratchRule::InclusiveScan { n, .. } => vec![*n],
            ScratchRule::CudnnAttentionBackward {
                b,
                h,
                h_k,
                s_q,
                s_kv,
                d_qk,
            } => vec![*b, *h, *h_k, *s_q, *s_kv, *d_qk],
            ScratchRule::EfficientAttentionBackward { dims, .. } => dims.to_vec(),
            ScratchRule::EmbeddingSegments { problem, .. } => {
                vec![problem.n, problem.num_weights, problem.stride]
            }
            ScratchRule::Reduce { sizes, strides, .. } => {
                sizes.iter().chain(strides.iter()).copied().collect()
            }
        }
    }

    /// The same rule with other [`inputs`](Self::inputs) (`None` if their
    /// number differs).
    pub fn with_inputs(&self, inputs: &[i64]) -> Option<ScratchRule> {
        let mut r = self.clone();
        match &mut r {
            ScratchRule::RadixSortPairs { n, .. }
            | ScratchRule::UniqueByKey { n, .. }
            | ScratchRule::ReduceCount { n }
            | ScratchRule::Select { n, .. }
            | ScratchRule::SumTruncating { n }
            | ScratchRule::RunLengthEncode { n }
            | ScratchRule::ScanByKey { n }
            | ScratchRule::InclusiveScan { n, .. } => {
                let [v] = inputs else { return None };
                *n = *v;
            }
            ScratchRule::CudnnAttentionBackward {
                b,
                h,
                h_k,
                s_q,
                s_kv,
                d_qk,
            } => {
                let [v0, v1, v2, v3, v4, v5] = inputs else {
                    return None;
                };
                (*b, *h, *h_k, *s_q, *s_kv, *d_qk) = (*v0, *v1, *v2, *v3, *v4, *v5);
            }
            ScratchRule::EfficientAttentionBackward { dims, .. } => {
                *dims = inputs.try_into().ok()?;
            }
            ScratchRule::EmbeddingSegments { problem, .. } => {
                let [n, w, s] = inputs else { return None };
                (problem.n, problem.num_weights, problem.stride) = (*n, *w, *s);
            }
            ScratchRule::Reduce { sizes, strides, .. } => {
                let d = sizes.len();
                if inputs.len() != 2 * d {
                    return None;
                }
                sizes.copy_from_slice(&inputs[..d]);
                strides.copy_from_slice(&inputs[d..]);
            }
        }
        Some(r)
    }

    /// Whether `other` is the same rule up to its inputs.
    pub fn same_rule(&self, other: &ScratchRule) -> bool {
        match (self, other) {
            (
                ScratchRule::RadixSortPairs {
                    key_bytes: a,
                    value_bytes: b,
                    end_bit: e,
                    ..
                },
                ScratchRule::RadixSortPairs {
                    key_bytes: c,
                    value_bytes: d,
                    end_bit: f,
                    ..
                },
            ) => a == c && b == d && e == f,
            (
                ScratchRule::UniqueByKey { key_bytes: a, .. },
                ScratchRule::UniqueByKey { key_bytes: b, .. },
            ) => a == b,
            (
                ScratchRule::InclusiveScan { t_bytes: a, .. },
                ScratchRule::InclusiveScan { t_bytes: b, .. },
            ) => a == b,
            (
                ScratchRule::CudnnAttentionBackward { .. },
                ScratchRule::CudnnAttentionBackward { .. },
            )
            | (ScratchRule::ReduceCount { .. }, ScratchRule::ReduceCount { .. })
            | (ScratchRule::SumTruncating { .. }, ScratchRule::SumTruncating { .. })
            | (ScratchRule::RunLengthEncode { .. }, ScratchRule::RunLengthEncode { .. })
            | (ScratchRule::ScanByKey { .. }, ScratchRule::ScanByKey { .. }) => true,
            (
                ScratchRule::Select { key_bytes: a, .. },
                ScratchRule::Select { key_bytes: b, .. },
            ) => a == b,
            (
                ScratchRule::EfficientAttentionBackward { dtype: a, .. },
                ScratchRule::EfficientAttentionBackward { dtype: b, .. },
            ) => a == b,
            (
                ScratchRule::EmbeddingSegments {
                    problem: p,
                    buffer: b,
                },
                ScratchRule::EmbeddingSegments {
                    problem: q,
                    buffer: c,
                },
            ) => b == c && p.index == q.index && p.grad == q.grad && p.path == q.path,
            (
                ScratchRule::Reduce {
                    sizes: s1,
                    reduced: r1,
                    elem: e1,
                    acc: a1,
                    index: i1,
                    semaphores: m1,
                    ..
                },
                ScratchRule::Reduce {
                    sizes: s2,
                    reduced: r2,
                    elem: e2,
                    acc: a2,
                    index: i2,
                    semaphores: m2,
                    ..
                },
            ) => s1.len() == s2.len() && r1 == r2 && e1 == e2 && a1 == a2 && i1 == i2 && m1 == m2,
            _ => false,
        }
    }
}

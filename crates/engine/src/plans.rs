//! What an op allocates inside its CUDA kernel, as a plan a front door that
//! runs PyTorch's own autograd (`vramscope run`) replays into its device.
//!
//! The eager twin runs the op on a scratch process and reports the
//! allocations and frees it made after its inputs: one rule, the eager
//! twin's, serves both front doors.

use crate::dtype::{DType, Device};
use crate::error::Result;
use crate::runtime::{DeviceProfile, MemEvent, Runtime, RuntimeConfig};

/// One step of a kernel's plan, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanStep {
    /// allocate `bytes`; `id` names it for [`PlanStep::Free`]; `output`: it
    /// is the op's result (its storage), not scratch
    Alloc {
        /// the plan's name for it
        id: u32,
        /// requested bytes
        bytes: u64,
        /// the op's result
        output: bool,
    },
    /// free the allocation `id`
    Free {
        /// the [`PlanStep::Alloc`]'s id
        id: u32,
    },
}

/// The events of `run` on a scratch process of `profile`, after `inputs`
/// made the inputs; the result's storage is the output.
fn plan<T>(
    profile: &DeviceProfile,
    inputs: impl FnOnce(&Runtime) -> Result<T>,
    run: impl FnOnce(&Runtime, &T) -> Result<crate::Tensor>,
) -> Result<Vec<PlanStep>> {
    let rt = Runtime::new(RuntimeConfig {
        profile: profile.clone(),
        ..Default::default()
    });
    let made = inputs(&rt)?;
    rt.start_event_log();
    let out = rt.no_grad(|| run(&rt, &made))?;
    let out_addr = out.data_ptr();
    let log = rt.take_event_log().unwrap_or_default();
    let mut ids: Vec<(u64, u32)> = Vec::new();
    let mut steps = Vec::new();
    let mut next = 0u32;
    for e in &log.events {
        match e {
            MemEvent::Alloc(r) => {
                ids.push((r.addr, next));
                steps.push(PlanStep::Alloc {
                    id: next,
                    bytes: r.bytes,
                    output: false,
                });
                next += 1;
            }
            MemEvent::Free(a) => {
                if let Some(i) = ids.iter().rposition(|(addr, _)| addr == a) {
                    let (_, id) = ids.remove(i);
                    steps.push(PlanStep::Free { id });
                }
            }
            MemEvent::Recategorize(..) => {}
        }
    }
    // the output is the allocation still live at its address, not a freed
    // temporary the allocator had put there before
    let out_id = ids
        .iter()
        .rev()
        .find(|(addr, _)| Some(*addr) == out_addr)
        .map(|&(_, id)| id);
    for step in &mut steps {
        if let PlanStep::Alloc { id, output, .. } = step {
            *output = Some(*id) == out_id;
        }
    }
    drop(out);
    Ok(steps)
}

/// `embedding_dense_backward(grad, indices, num_weights, ...)` on CUDA
/// (`ops/nn.rs`): `grad` of `grad_sizes` (contiguous or not), `n` indices
/// of `index` dtype (contiguous or not); `path` names the bags' caller and
/// the deterministic flag ([`crate::ops::nn::EmbeddingPath`]).
#[allow(clippy::too_many_arguments)]
pub fn embedding_dense_backward_plan(
    profile: &DeviceProfile,
    grad_sizes: &[i64],
    grad_dtype: DType,
    grad_contiguous: bool,
    n: i64,
    index: DType,
    indices_contiguous: bool,
    num_weights: i64,
    path: crate::ops::nn::EmbeddingPath,
) -> Result<Vec<PlanStep>> {
    plan(
        profile,
        |rt| {
            let g = rt.zeros(grad_sizes, grad_dtype, Device::Cuda)?;
            let g = if grad_contiguous || grad_sizes.len() < 2 {
                g
            } else {
                // a non-contiguous gradient of the same sizes: one element expanded, not
                // contiguous for any sizes a non-contiguous gradient can have (a transpose
                // of the last two dims is contiguous when the last is 1)
                rt.zeros(&vec![1; grad_sizes.len()], grad_dtype, Device::Cuda)?
                    .expand(grad_sizes)?
            };
            let idx = if indices_contiguous {
                rt.zeros(&[n], index, Device::Cuda)?
            } else {
                rt.zeros(&[1], index, Device::Cuda)?.expand(&[n])?
            };
            Ok((g, idx))
        },
        |_, (g, idx)| crate::ops::nn::embedding_sorted_backward(g, idx, num_weights, path),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_indices_allocate_the_gradient_only() {
        let p = DeviceProfile::h100_torch_2_11();
        let steps = embedding_dense_backward_plan(
            &p,
            &[8, 256, 64],
            DType::F32,
            true,
            2048,
            DType::I64,
            true,
            1000,
            Default::default(),
        )
        .unwrap();
        assert_eq!(
            steps,
            vec![PlanStep::Alloc {
                id: 0,
                bytes: 1000 * 64 * 4,
                output: true
            }]
        );
    }

    #[test]
    fn many_indices_sort_and_free_their_scratch() {
        let p = DeviceProfile::h100_torch_2_11();
        let steps = embedding_dense_backward_plan(
            &p,
            &[8, 512, 64],
            DType::BF16,
            true,
            4096,
            DType::I64,
            true,
            32000,
            Default::default(),
        )
        .unwrap();
        let allocs = steps
            .iter()
            .filter(|s| matches!(s, PlanStep::Alloc { .. }))
            .count();
        let frees = steps
            .iter()
            .filter(|s| matches!(s, PlanStep::Free { .. }))
            .count();
        // everything but the gradient is freed inside the op
        assert_eq!(allocs, frees + 1);
        let outputs: Vec<u64> = steps
            .iter()
            .filter_map(|s| match s {
                PlanStep::Alloc {
                    bytes,
                    output: true,
                    ..
                } => Some(*bytes),
                _ => None,
            })
            .collect();
        assert_eq!(outputs, vec![32000 * 64 * 2]);
    }

    #[test]
    fn a_strided_gradient_with_a_last_dim_of_one_is_copied() {
        // blind106/db05's first-order term: `Embedding(3,420,000, 1)(idx).sum(1)`, whose
        // backward hands `embedding_dense_backward` a (4096, 26, 1) gradient of strides
        // (1, 0, 1); `grad_.contiguous()` (Embedding.cu) copied it on the H200: 425,984 bytes
        let p = DeviceProfile::h100_torch_2_11();
        let steps = embedding_dense_backward_plan(
            &p,
            &[4096, 26, 1],
            DType::F32,
            false,
            4096 * 26,
            DType::I64,
            true,
            3_420_000,
            Default::default(),
        )
        .unwrap();
        assert!(steps.iter().any(|s| matches!(
            s,
            PlanStep::Alloc {
                bytes: 425_984,
                output: false,
                ..
            }
        )));
    }

    #[test]
    fn a_temporary_freed_where_the_gradient_then_goes_is_not_the_output() {
        // blind29/ac04's relation embedding (1000 x 200 fp32, 16,384 indices): the
        // gradient reuses the address the freed `arange` had
        let p = DeviceProfile::h100_torch_2_11();
        let steps = embedding_dense_backward_plan(
            &p,
            &[16384, 200],
            DType::F32,
            true,
            16384,
            DType::I64,
            true,
            1000,
            Default::default(),
        )
        .unwrap();
        let outputs: Vec<(u32, u64)> = steps
            .iter()
            .filter_map(|s| match s {
                PlanStep::Alloc {
                    id,
                    bytes,
                    output: true,
                } => Some((*id, *bytes)),
                _ => None,
            })
            .collect();
        assert_eq!(outputs.len(), 1);
        assert_eq!(outputs[0].1, 1000 * 200 * 4);
        // and it is never freed inside the op
        assert!(!steps
            .iter()
            .any(|s| matches!(s, PlanStep::Free { id } if *id == outputs[0].0)));
    }
}

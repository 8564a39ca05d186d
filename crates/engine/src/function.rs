//! `torch.autograd.Function`: a user op whose forward runs without
//! recording (`no_grad`), whose `ctx.save_for_backward` tensors are kept by
//! the node, and whose backward is user code run on the autograd thread.

use std::rc::Rc;

use crate::autograd::{Backward, CustomBackward, Pending};
use crate::error::Result;
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// The `ctx` of a custom function's forward.
#[derive(Default)]
pub struct Ctx {
    saved: Vec<Tensor>,
}

impl Ctx {
    /// `ctx.save_for_backward(*tensors)`.
    pub fn save_for_backward(&mut self, tensors: &[&Tensor]) {
        self.saved = tensors.iter().map(|t| (*t).clone()).collect();
    }
}

/// `Function.apply(*inputs)`: runs `forward` under `no_grad`, then, if any
/// input requires grad, wires the single output to a node named `name`
/// holding the tensors saved in `ctx` (inputs as themselves, outputs as
/// their data) and running `backward`.
pub fn apply(
    rt: &Runtime,
    name: &'static str,
    inputs: &[&Tensor],
    forward: impl FnOnce(&mut Ctx, &[&Tensor]) -> Result<Tensor>,
    backward: impl Fn(&[Tensor], &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> + 'static,
) -> Result<Tensor> {
    let opt: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    let pending = Pending::begin(rt, &opt);
    let mut ctx = Ctx::default();
    let out = rt.no_grad(|| forward(&mut ctx, inputs))?;
    // an input returned as is would need a view/alias node; outputs are fresh here
    let out = if inputs.iter().any(|i| i.same(&out)) {
        out.detach()
    } else {
        out
    };
    if let Some(p) = pending {
        let saved = std::mem::take(&mut ctx.saved);
        let n = saved.len();
        p.finish_saving(
            |p| {
                for t in &saved {
                    if t.shares_storage(&out) && t.same(&out) {
                        p.save_output(t);
                    } else {
                        p.save(t);
                    }
                }
                let b: CustomBackward = Rc::new(backward);
                Backward::Custom {
                    name,
                    backward: b,
                    num_saved: n,
                }
            },
            &[&out],
        );
    }
    Ok(out)
}

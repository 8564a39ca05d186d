//! Reference modules, mirroring `torch/nn/modules/*.py` of PyTorch 2.11 op
//! by op, with Python's variable lifetimes (a name rebound frees the old
//! value once nothing else holds it).
//!
//! Modules are built on the CPU (no device memory, as `nn.Linear(...)`
//! initialises its parameters on the host) and moved with
//! [`Module::cuda`], which allocates parameters in `Module._apply` order:
//! children first, then the module's own parameters.

mod attention;
mod basic;

pub use attention::{MultiheadAttention, TransformerEncoderLayer};
pub use basic::{
    Activation, CrossEntropyLoss, Dropout, Embedding, LayerNorm, Linear, MSELoss, Sequential,
};

use crate::dtype::{DType, Device};
use crate::error::Result;
use crate::runtime::{Category, Runtime};
use crate::tensor::Tensor;

/// What every module offers.
pub trait Module {
    /// `module(x)`
    fn forward(&self, x: &Tensor) -> Result<Tensor>;
    /// `named_parameters()` order: own parameters first, then children's.
    fn parameters(&self) -> Vec<Tensor>;
    /// `Module._apply(fn)`: children first, then own parameters (replaced by `f`'s result).
    fn apply_params(&mut self, f: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()>;
    /// `module.train(mode)` (recursively).
    fn set_training(&mut self, mode: bool);

    /// `module.cuda()`: every parameter copied to the device.
    fn cuda(&mut self) -> Result<()> {
        self.apply_params(&mut |p: &Tensor| {
            let rt = p.runtime().clone();
            let out = rt.with_category(Category::Parameter, || {
                rt.no_grad(|| p.to_device(Device::Cuda))
            })?;
            if p.requires_grad() {
                out.requires_grad_(true)?;
            }
            Ok(out)
        })
    }
    /// `module.eval()`
    fn eval(&mut self) {
        self.set_training(false);
    }
    /// `module.train()`
    fn train(&mut self) {
        self.set_training(true);
    }
}

/// A new parameter on the CPU (`nn.Parameter(torch.empty(shape))`).
pub fn parameter(rt: &Runtime, shape: &[i64], dtype: DType) -> Result<Tensor> {
    let t = match rt.parameters_on_device_unallocated() {
        Some(dt) => rt.device_unallocated(shape, dt)?,
        None => rt.empty(shape, dtype, Device::Cpu)?,
    };
    t.requires_grad_(true)?;
    Ok(t)
}

pub(crate) fn apply_one(
    p: &mut Tensor,
    f: &mut dyn FnMut(&Tensor) -> Result<Tensor>,
) -> Result<()> {
    let n = f(p)?;
    *p = n;
    Ok(())
}

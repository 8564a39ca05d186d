//! `Linear`, activations, `Dropout`, `LayerNorm`, `Embedding`, losses and
//! `Sequential`.

use crate::dtype::DType;
use crate::error::Result;
use crate::nn::{apply_one, parameter, Module};
use crate::runtime::Runtime;
use crate::tensor::Tensor;

/// `nn.Linear(in, out, bias)`: `F.linear(x, weight, bias)`.
#[derive(Clone)]
pub struct Linear {
    /// `(out, in)`
    pub weight: Tensor,
    /// `(out,)`
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A CPU-initialised `nn.Linear`.
    pub fn new(rt: &Runtime, in_features: i64, out_features: i64, bias: bool) -> Result<Self> {
        Self::new_in(rt, in_features, out_features, bias, DType::F32)
    }
    /// A CPU-initialised `nn.Linear(..., dtype=dtype)`: weight, then bias.
    pub fn new_in(
        rt: &Runtime,
        in_features: i64,
        out_features: i64,
        bias: bool,
        dtype: DType,
    ) -> Result<Self> {
        Ok(Linear {
            weight: parameter(rt, &[out_features, in_features], dtype)?,
            bias: if bias {
                Some(parameter(rt, &[out_features], dtype)?)
            } else {
                None
            },
        })
    }
    /// Its parameters as `_apply` visits them: weight, then bias.
    pub fn params_mut(&mut self) -> impl Iterator<Item = &mut Tensor> {
        std::iter::once(&mut self.weight).chain(self.bias.as_mut())
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.runtime()
            .in_module("Linear", || x.linear(&self.weight, self.bias.as_ref()))
    }
    fn parameters(&self) -> Vec<Tensor> {
        let mut v = vec![self.weight.clone()];
        v.extend(self.bias.clone());
        v
    }
    fn apply_params(&mut self, f: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        apply_one(&mut self.weight, f)?;
        if let Some(b) = &mut self.bias {
            apply_one(b, f)?;
        }
        Ok(())
    }
    fn set_training(&mut self, _: bool) {}
}

/// Parameter-free pointwise modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `nn.ReLU()` (saves its result)
    ReLU,
    /// `nn.GELU()` (saves its input)
    GELU,
    /// `nn.Sigmoid()` (saves its result)
    Sigmoid,
    /// `nn.SiLU()` (saves its input)
    SiLU,
    /// `nn.Tanh()` (saves its result)
    Tanh,
}

impl Module for Activation {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let name = format!("{self:?}");
        x.runtime().in_module(&name, || match self {
            Activation::ReLU => x.relu(),
            Activation::GELU => x.gelu(),
            Activation::Sigmoid => x.sigmoid(),
            Activation::SiLU => x.silu(),
            Activation::Tanh => x.tanh(),
        })
    }
    fn parameters(&self) -> Vec<Tensor> {
        Vec::new()
    }
    fn apply_params(&mut self, _: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        Ok(())
    }
    fn set_training(&mut self, _: bool) {}
}

/// `nn.Dropout(p)`: in training mode `native_dropout` (a 1-byte mask per
/// element is saved); in eval mode, or with `p == 0`, the input itself.
pub struct Dropout {
    /// drop probability
    pub p: f64,
    /// `module.training`
    pub training: bool,
}

impl Dropout {
    /// `nn.Dropout(p)` in training mode.
    pub fn new(p: f64) -> Self {
        Dropout { p, training: true }
    }
}

impl Module for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.runtime()
            .in_module("Dropout", || x.dropout(self.p, self.training))
    }
    fn parameters(&self) -> Vec<Tensor> {
        Vec::new()
    }
    fn apply_params(&mut self, _: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        Ok(())
    }
    fn set_training(&mut self, mode: bool) {
        self.training = mode;
    }
}

/// `nn.LayerNorm(normalized_shape)` with affine weight and bias.
pub struct LayerNorm {
    /// `normalized_shape`
    pub normalized: Vec<i64>,
    /// gamma
    pub weight: Tensor,
    /// beta
    pub bias: Tensor,
}

impl LayerNorm {
    /// A CPU-initialised `nn.LayerNorm`.
    pub fn new(rt: &Runtime, normalized: &[i64]) -> Result<Self> {
        Self::new_in(rt, normalized, DType::F32)
    }
    /// A CPU-initialised `nn.LayerNorm(..., dtype=dtype)`: weight, then bias.
    pub fn new_in(rt: &Runtime, normalized: &[i64], dtype: DType) -> Result<Self> {
        Ok(LayerNorm {
            normalized: normalized.to_vec(),
            weight: parameter(rt, normalized, dtype)?,
            bias: parameter(rt, normalized, dtype)?,
        })
    }
    /// `F.layer_norm(x, normalized_shape, weight, bias)`: the forward, in
    /// the caller's module scope.
    pub fn layer_norm(&self, x: &Tensor) -> Result<Tensor> {
        x.layer_norm(&self.normalized, Some(&self.weight), Some(&self.bias))
    }
    /// Its parameters as `_apply` visits them: weight, then bias.
    pub fn params_mut(&mut self) -> [&mut Tensor; 2] {
        [&mut self.weight, &mut self.bias]
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.runtime().in_module("LayerNorm", || self.layer_norm(x))
    }
    fn parameters(&self) -> Vec<Tensor> {
        vec![self.weight.clone(), self.bias.clone()]
    }
    fn apply_params(&mut self, f: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        apply_one(&mut self.weight, f)?;
        apply_one(&mut self.bias, f)
    }
    fn set_training(&mut self, _: bool) {}
}

/// `nn.Embedding(num, dim)`.
pub struct Embedding {
    /// `(num, dim)`
    pub weight: Tensor,
}

impl Embedding {
    /// A CPU-initialised `nn.Embedding`.
    pub fn new(rt: &Runtime, num: i64, dim: i64) -> Result<Self> {
        Ok(Embedding {
            weight: parameter(rt, &[num, dim], DType::F32)?,
        })
    }
}

impl Module for Embedding {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.runtime()
            .in_module("Embedding", || Tensor::embedding(&self.weight, x))
    }
    fn parameters(&self) -> Vec<Tensor> {
        vec![self.weight.clone()]
    }
    fn apply_params(&mut self, f: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        apply_one(&mut self.weight, f)
    }
    fn set_training(&mut self, _: bool) {}
}

/// `nn.MSELoss()` (mean reduction).
#[derive(Debug, Default, Clone, Copy)]
pub struct MSELoss;

impl MSELoss {
    /// `loss_fn(input, target)`
    pub fn forward(&self, input: &Tensor, target: &Tensor) -> Result<Tensor> {
        input
            .runtime()
            .in_module("MSELoss", || input.mse_loss(target))
    }
}

/// `nn.CrossEntropyLoss()` (mean reduction, class indices).
#[derive(Debug, Default, Clone, Copy)]
pub struct CrossEntropyLoss;

impl CrossEntropyLoss {
    /// `loss_fn(logits, target)`
    pub fn forward(&self, input: &Tensor, target: &Tensor) -> Result<Tensor> {
        input
            .runtime()
            .in_module("CrossEntropyLoss", || input.cross_entropy(target))
    }
}

/// `nn.Sequential(*modules)`: `for module in self: input = module(input)`.
pub struct Sequential {
    /// the children, in order
    pub modules: Vec<Box<dyn Module>>,
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let rt = x.runtime().clone();
        rt.in_module("Sequential", || {
            let mut input = x.clone();
            for (i, m) in self.modules.iter().enumerate() {
                let out = rt.in_module(&i.to_string(), || m.forward(&input))?;
                input = out;
            }
            Ok(input)
        })
    }
    fn parameters(&self) -> Vec<Tensor> {
        self.modules.iter().flat_map(|m| m.parameters()).collect()
    }
    fn apply_params(&mut self, f: &mut dyn FnMut(&Tensor) -> Result<Tensor>) -> Result<()> {
        for m in &mut self.modules {
            m.apply_params(f)?;
        }
        Ok(())
    }
    fn set_training(&mut self, mode: bool) {
        for m in &mut self.modules {
            m.set_training(mode);
        }
    }
}

//! The optimizers of `torch.optim` (PyTorch 2.11), each in its three
//! implementations, with the state it creates and the temporaries its
//! step allocates. One seam: [`OptimizerKind`] names an algorithm,
//! [`Implementation`] how its step runs, and [`Optimizer`] matches both
//! exhaustively, so a new optimizer is a new variant here and nowhere else
//! (its name, its implementations, its state and its step).
//!
//! Sources: `torch/optim/{adam,adamw,sgd,adagrad,rmsprop,_adafactor}.py` (`_init_group`,
//! `_single_tensor_*`, `_multi_tensor_*`, `_fused_*`) and the ATen kernels
//! they call: `_foreach_*` out-of-place ops allocate one `empty_like` output
//! per tensor in list order (`ForeachUnaryOp.cu`, `ForeachBinaryOpScalarList.cu`);
//! in-place `_foreach_*_` ops and the fused kernels (`_fused_adam(w)_`,
//! `_fused_sgd_`: `multi_tensor_apply_for_fused_optimizer`, its metadata
//! passed as kernel arguments) allocate nothing.

use std::fmt;

use crate::dtype::{DType, Device};
use crate::error::{EngineError, Result};
use crate::ops::empty_like;
use crate::runtime::Category;
use crate::tensor::Tensor;

/// An algorithm of `torch.optim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OptimizerKind {
    /// `torch.optim.AdamW` (`weight_decay=0.01`, decoupled)
    AdamW,
    /// `torch.optim.Adam` (`weight_decay=0`)
    Adam,
    /// `torch.optim.SGD` (a momentum buffer per parameter when `momentum != 0`)
    Sgd,
    /// `torch.optim.Adagrad` (its `sum` state is made by the constructor)
    Adagrad,
    /// `torch.optim.RMSprop` (a momentum buffer per parameter when `momentum > 0`)
    RmsProp,
    /// `torch.optim.Adafactor` (PyTorch's, not transformers'): a row and a
    /// column factor per matrix, a full variance per vector
    Adafactor,
}

impl OptimizerKind {
    /// Every optimizer the twin models.
    pub const ALL: [OptimizerKind; 6] = [
        OptimizerKind::AdamW,
        OptimizerKind::Adam,
        OptimizerKind::Sgd,
        OptimizerKind::Adagrad,
        OptimizerKind::RmsProp,
        OptimizerKind::Adafactor,
    ];

    /// The name in the CLI, case lists and JSON (`adamw`, `sgd`, ...).
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::AdamW => "adamw",
            OptimizerKind::Adam => "adam",
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::Adagrad => "adagrad",
            OptimizerKind::RmsProp => "rmsprop",
            OptimizerKind::Adafactor => "adafactor",
        }
    }

    /// The class's name (`AdamW`).
    pub fn class_name(self) -> &'static str {
        match self {
            OptimizerKind::AdamW => "AdamW",
            OptimizerKind::Adam => "Adam",
            OptimizerKind::Sgd => "SGD",
            OptimizerKind::Adagrad => "Adagrad",
            OptimizerKind::RmsProp => "RMSprop",
            OptimizerKind::Adafactor => "Adafactor",
        }
    }

    /// The class (`torch.optim.AdamW`).
    pub fn class(self) -> String {
        format!("torch.optim.{}", self.class_name())
    }

    /// The file under `torch/` that defines the class (`optim/adamw.py`).
    pub fn source_file(self) -> &'static str {
        match self {
            OptimizerKind::AdamW => "optim/adamw.py",
            OptimizerKind::Adam => "optim/adam.py",
            OptimizerKind::Sgd => "optim/sgd.py",
            OptimizerKind::Adagrad => "optim/adagrad.py",
            OptimizerKind::RmsProp => "optim/rmsprop.py",
            OptimizerKind::Adafactor => "optim/_adafactor.py",
        }
    }

    /// The optimizer of [`Self::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The implementations PyTorch runs on CUDA parameters: RMSprop and
    /// Adafactor have no `fused` argument, and Adagrad's fused kernel is
    /// CPU-only (`_device_dtype_check_for_fused(p, cuda_unsupported=True)`).
    pub fn implementations(self) -> &'static [Implementation] {
        use Implementation::*;
        match self {
            OptimizerKind::AdamW | OptimizerKind::Adam | OptimizerKind::Sgd => {
                &[ForLoop, Foreach, Fused]
            }
            OptimizerKind::Adagrad | OptimizerKind::RmsProp | OptimizerKind::Adafactor => {
                &[ForLoop, Foreach]
            }
        }
    }

    /// The implementation the class runs without `foreach`/`fused`
    /// arguments on CUDA: foreach (`_default_to_fused_or_foreach`), but
    /// Adafactor's for-loop (`adafactor()` takes `foreach=None` as false:
    /// `if foreach: _multi_tensor_adafactor else _single_tensor_adafactor`).
    pub fn default_implementation(self) -> Implementation {
        match self {
            OptimizerKind::Adafactor => Implementation::ForLoop,
            OptimizerKind::AdamW
            | OptimizerKind::Adam
            | OptimizerKind::Sgd
            | OptimizerKind::Adagrad
            | OptimizerKind::RmsProp => Implementation::Foreach,
        }
    }
}

impl fmt::Display for OptimizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How an optimizer's step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Implementation {
    /// `foreach=False`: `_single_tensor_*`, one parameter at a time
    ForLoop,
    /// `foreach=True`: `_multi_tensor_*`, PyTorch's default for CUDA
    /// parameters (`_default_to_fused_or_foreach(..., use_fused=False)`)
    #[default]
    Foreach,
    /// `fused=True`: one `_fused_*_` kernel; the `step` state on the device
    Fused,
}

impl Implementation {
    /// Every implementation.
    pub const ALL: [Implementation; 3] = [
        Implementation::ForLoop,
        Implementation::Foreach,
        Implementation::Fused,
    ];

    /// The name in the CLI, case lists and JSON (`for-loop`, `foreach`, `fused`).
    pub fn name(self) -> &'static str {
        match self {
            Implementation::ForLoop => "for-loop",
            Implementation::Foreach => "foreach",
            Implementation::Fused => "fused",
        }
    }

    /// The implementation of [`Self::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|i| i.name() == name)
    }
}

impl fmt::Display for Implementation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An optimizer as constructed: `torch.optim.<kind>(params, momentum=...,
/// foreach=..., fused=...)`, the other arguments at their defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptimizerConfig {
    /// the algorithm
    pub kind: OptimizerKind,
    /// how its step runs
    pub implementation: Implementation,
    /// `momentum` (SGD, RMSprop; ignored by the others)
    pub momentum: f64,
}

impl OptimizerConfig {
    /// `kind` with PyTorch's defaults (foreach, no momentum).
    pub fn new(kind: OptimizerKind) -> Self {
        OptimizerConfig {
            kind,
            implementation: Implementation::default(),
            momentum: 0.0,
        }
    }

    /// An error naming what PyTorch would refuse: an implementation the
    /// optimizer does not have on CUDA, or a negative momentum.
    pub fn check(&self) -> Result<()> {
        if !self.kind.implementations().contains(&self.implementation) {
            let have: Vec<&str> = self
                .kind
                .implementations()
                .iter()
                .map(|i| i.name())
                .collect();
            return Err(EngineError::Unsupported {
                what: format!(
                    "{} with implementation {} (on CUDA it has {})",
                    self.kind.class(),
                    self.implementation,
                    have.join(", ")
                ),
            });
        }
        if self.momentum.is_nan() || self.momentum < 0.0 {
            return Err(EngineError::Unsupported {
                what: format!("momentum {} (expected >= 0)", self.momentum),
            });
        }
        Ok(())
    }

    /// `weight_decay` at its default: AdamW's 0.01 (decoupled: an in-place
    /// `mul_` of the parameters), 0 for the others.
    fn weight_decay(&self) -> f64 {
        match self.kind {
            OptimizerKind::AdamW => 0.01,
            OptimizerKind::Adam
            | OptimizerKind::Sgd
            | OptimizerKind::Adagrad
            | OptimizerKind::RmsProp
            | OptimizerKind::Adafactor => 0.0,
        }
    }
}

/// One parameter's state.
struct State {
    /// `state["step"]`: a CPU scalar, on the device when fused
    _step: Option<Tensor>,
    /// the per-parameter buffers, in the order `_init_group` creates them
    /// (`exp_avg`, `exp_avg_sq`; `momentum_buffer`; `sum`; `square_avg`,
    /// `momentum_buffer`)
    buffers: Vec<Tensor>,
}

/// An optimizer over a list of parameters.
pub struct Optimizer {
    config: OptimizerConfig,
    params: Vec<Tensor>,
    state: Vec<Option<State>>,
}

impl Optimizer {
    /// The constructor: Adagrad creates every parameter's `step` and `sum`
    /// here (`Adagrad.__init__`); the others create nothing until their
    /// first step.
    pub fn new(config: OptimizerConfig, params: Vec<Tensor>) -> Result<Self> {
        config.check()?;
        let n = params.len();
        let mut opt = Optimizer {
            config,
            params,
            state: (0..n).map(|_| None).collect(),
        };
        match config.kind {
            OptimizerKind::Adagrad => {
                for i in 0..n {
                    // state["step"] = torch.tensor(0.0); state["sum"] = torch.full_like(p, 0)
                    let st = opt.new_state(i, &["full_like"])?;
                    opt.state[i] = Some(st);
                }
            }
            OptimizerKind::AdamW
            | OptimizerKind::Adam
            | OptimizerKind::Sgd
            | OptimizerKind::RmsProp
            | OptimizerKind::Adafactor => {}
        }
        Ok(opt)
    }

    /// `torch.optim.AdamW(params)` (foreach).
    pub fn adamw(params: Vec<Tensor>) -> Self {
        Self::new(OptimizerConfig::new(OptimizerKind::AdamW), params)
            .expect("foreach AdamW is always valid")
    }

    /// `torch.optim.SGD(params, momentum=momentum)` (foreach).
    pub fn sgd(params: Vec<Tensor>, momentum: f64) -> Result<Self> {
        Self::new(
            OptimizerConfig {
                momentum,
                ..OptimizerConfig::new(OptimizerKind::Sgd)
            },
            params,
        )
    }

    /// What it was built as.
    pub fn config(&self) -> &OptimizerConfig {
        &self.config
    }

    /// The state buffers of parameter `i` (none before its first step,
    /// but Adagrad's).
    pub fn state_buffers(&self, i: usize) -> &[Tensor] {
        self.state[i].as_ref().map_or(&[], |s| &s.buffers)
    }

    /// Parameter `i`'s state: its `step` (a CPU scalar, or a float32 scalar
    /// on the device when fused: `_get_scalar_dtype(is_fused=True)`), then
    /// one buffer like the parameter per op in `buffers`.
    fn new_state(&self, i: usize, buffers: &[&'static str]) -> Result<State> {
        let p = &self.params[i];
        let rt = p.runtime().clone();
        rt.with_category(Category::OptimizerState, || -> Result<State> {
            let step = match self.config.implementation {
                Implementation::Fused => rt.scalar_tensor(DType::F32, Device::Cuda)?,
                Implementation::ForLoop | Implementation::Foreach => {
                    rt.scalar_tensor(p.dtype(), Device::Cpu)?
                }
            };
            let mut bufs = Vec::with_capacity(buffers.len());
            for op in buffers {
                bufs.push(empty_like(p, p.dtype(), op, Category::OptimizerState)?);
            }
            Ok(State {
                _step: Some(step),
                buffers: bufs,
            })
        })
    }

    /// `opt.step()`
    pub fn step(&mut self) -> Result<()> {
        let Some(rt) = self.params.first().map(|p| p.runtime().clone()) else {
            return Ok(());
        };
        rt.no_grad(|| -> Result<()> {
            // the parameters with a gradient, in order (HF models put every
            // parameter in one device/dtype group)
            let idx: Vec<usize> = (0..self.params.len())
                .filter(|&i| self.params[i].grad().is_some())
                .collect();
            match self.config.kind {
                OptimizerKind::AdamW | OptimizerKind::Adam => self.adam(&idx),
                OptimizerKind::Sgd => self.sgd_step(&idx),
                OptimizerKind::Adagrad => self.adagrad(&idx),
                OptimizerKind::RmsProp => self.rmsprop(&idx),
                OptimizerKind::Adafactor => self.adafactor(&idx),
            }
        })
    }

    /// `opt.zero_grad(set_to_none=True)`
    pub fn zero_grad(&self) {
        for p in &self.params {
            p.set_grad(None);
        }
    }

    /// Create the state `_init_group` creates lazily for the parameters in
    /// `idx` that have none.
    fn init_group(&mut self, idx: &[usize], buffers: &[&'static str]) -> Result<()> {
        for &i in idx {
            if self.state[i].is_none() {
                let st = self.new_state(i, buffers)?;
                self.state[i] = Some(st);
            }
        }
        Ok(())
    }

    fn buffer(&self, i: usize, k: usize) -> &Tensor {
        &self.state[i].as_ref().expect("state initialised").buffers[k]
    }

    /// `Adam.step` / `AdamW.step`: `_init_group` (`step`, `exp_avg`,
    /// `exp_avg_sq` per parameter), then `_single_tensor_adam`,
    /// `_multi_tensor_adam` or `_fused_adam`.
    fn adam(&mut self, idx: &[usize]) -> Result<()> {
        self.init_group(idx, &["zeros_like", "zeros_like"])?;
        let decoupled = self.config.kind == OptimizerKind::AdamW;
        let wd = self.config.weight_decay();
        match self.config.implementation {
            Implementation::ForLoop => {
                // per parameter: `grad = grad.add(param, alpha=wd)` (Adam
                // with weight decay), `denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)`:
                // the sqrt's result is freed once the division's exists, and
                // the previous parameter's `denom` when the new one is bound
                let mut grad_tmp: Option<Tensor> = None;
                let mut denom: Option<Tensor> = None;
                for &i in idx {
                    let p = &self.params[i];
                    let mut grad = p.grad().expect("has a grad");
                    if wd != 0.0 {
                        if decoupled {
                            p.scalar_("mul_")?;
                        } else {
                            let g = empty_like(&grad, grad.dtype(), "add", Category::Temporary)?;
                            grad_tmp = Some(g.clone());
                            grad = g;
                        }
                    }
                    let exp_avg = self.buffer(i, 0);
                    let exp_avg_sq = self.buffer(i, 1);
                    exp_avg.add_(&grad, 1.0)?; // lerp_
                    exp_avg_sq.scalar_("mul_")?; // .mul_(beta2).addcmul_(grad, grad)
                    let root =
                        empty_like(exp_avg_sq, exp_avg_sq.dtype(), "sqrt", Category::Temporary)?;
                    let d = empty_like(&root, root.dtype(), "div", Category::Temporary)?;
                    drop(root);
                    denom = Some(d);
                    p.add_(denom.as_ref().expect("set above"), 1.0)?; // addcdiv_
                }
                // the frame's locals, in their order: `grad`, then `denom`
                drop(grad_tmp);
                drop(denom);
            }
            Implementation::Foreach => {
                let mut grads: Vec<Tensor> =
                    idx.iter().filter_map(|&i| self.params[i].grad()).collect();
                if wd != 0.0 {
                    if decoupled {
                        for &i in idx {
                            self.params[i].scalar_("_foreach_mul_")?;
                        }
                    } else {
                        // device_grads = torch._foreach_add(device_grads, device_params, alpha=wd)
                        let mut out = Vec::with_capacity(grads.len());
                        for g in &grads {
                            out.push(empty_like(
                                g,
                                g.dtype(),
                                "_foreach_add",
                                Category::Temporary,
                            )?);
                        }
                        grads = out;
                    }
                }
                for (j, &i) in idx.iter().enumerate() {
                    self.buffer(i, 0).add_(&grads[j], 1.0)?; // _foreach_lerp_
                    self.buffer(i, 1).scalar_("_foreach_mul_")?;
                }
                // del device_grads
                free_list(grads);
                // exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)
                let mut sqrt = Vec::with_capacity(idx.len());
                for &i in idx {
                    let src = self.buffer(i, 1);
                    sqrt.push(empty_like(
                        src,
                        src.dtype(),
                        "_foreach_sqrt",
                        Category::Temporary,
                    )?);
                }
                for (j, &i) in idx.iter().enumerate() {
                    self.params[i].add_(&sqrt[j], 1.0)?; // _foreach_addcdiv_
                }
                free_list(sqrt);
            }
            Implementation::Fused => {
                // torch._foreach_add_(device_state_steps, 1); torch._fused_adam(w)_(...)
                for &i in idx {
                    self.params[i].scalar_("_fused_adam_")?;
                }
            }
        }
        Ok(())
    }

    /// `SGD.step`: the momentum buffers are the gradients' clones on the
    /// first step (`grad.detach().clone()` in `_single_tensor_sgd` and
    /// `_multi_tensor_sgd`, `torch.empty_like(g)` in `_fused_sgd`), all
    /// in parameter order; without weight decay or Nesterov no
    /// implementation allocates anything else.
    fn sgd_step(&mut self, idx: &[usize]) -> Result<()> {
        let momentum = self.config.momentum != 0.0;
        for &i in idx {
            let p = &self.params[i];
            let grad = p.grad().expect("has a grad");
            if momentum {
                match &self.state[i] {
                    Some(st) => st.buffers[0].scalar_("mul_")?,
                    None => {
                        let rt = p.runtime().clone();
                        let op = match self.config.implementation {
                            Implementation::Fused => "empty_like",
                            Implementation::ForLoop | Implementation::Foreach => "clone",
                        };
                        let b = rt.with_category(Category::OptimizerState, || {
                            empty_like(&grad, grad.dtype(), op, Category::OptimizerState)
                        })?;
                        self.state[i] = Some(State {
                            _step: None,
                            buffers: vec![b],
                        });
                    }
                }
            }
        }
        for &i in idx {
            let p = &self.params[i];
            let update = match &self.state[i] {
                Some(st) if momentum => st.buffers[0].clone(),
                _ => p.grad().expect("has a grad"),
            };
            p.add_(&update, 1.0)?;
        }
        Ok(())
    }

    /// `Adagrad.step` (its state made by the constructor):
    /// `_single_tensor_adagrad`'s `std = state_sum.sqrt().add_(eps)` per
    /// parameter (the previous one freed when the new one is bound), or
    /// `_multi_tensor_adagrad`'s `std = torch._foreach_sqrt(sums)` and
    /// `numerator = torch._foreach_mul(grads, minus_clr)`, freed with the
    /// frame (`std` first: the locals' order).
    fn adagrad(&mut self, idx: &[usize]) -> Result<()> {
        match self.config.implementation {
            Implementation::ForLoop => {
                let mut std: Option<Tensor> = None;
                for &i in idx {
                    let p = &self.params[i];
                    let sum = self.buffer(i, 0);
                    sum.scalar_("addcmul_")?;
                    let s = empty_like(sum, sum.dtype(), "sqrt", Category::Temporary)?;
                    std = Some(s);
                    p.add_(std.as_ref().expect("set above"), 1.0)?; // addcdiv_
                }
                drop(std);
            }
            Implementation::Foreach => {
                let grads: Vec<Tensor> =
                    idx.iter().filter_map(|&i| self.params[i].grad()).collect();
                for &i in idx {
                    self.buffer(i, 0).scalar_("_foreach_addcmul_")?;
                }
                let mut std = Vec::with_capacity(idx.len());
                for &i in idx {
                    let s = self.buffer(i, 0);
                    std.push(empty_like(
                        s,
                        s.dtype(),
                        "_foreach_sqrt",
                        Category::Temporary,
                    )?);
                }
                let mut numerator = Vec::with_capacity(idx.len());
                for g in &grads {
                    numerator.push(empty_like(
                        g,
                        g.dtype(),
                        "_foreach_mul",
                        Category::Temporary,
                    )?);
                }
                for (j, &i) in idx.iter().enumerate() {
                    self.params[i].add_(&std[j], 1.0)?; // _foreach_addcdiv_
                }
                free_list(std);
                free_list(numerator);
            }
            Implementation::Fused => unreachable!("refused by OptimizerConfig::check"),
        }
        Ok(())
    }

    /// `RMSprop.step`: `_init_group` (`step`, `square_avg`, and
    /// `momentum_buffer` when `momentum > 0`), then
    /// `_single_tensor_rmsprop`'s `avg = square_avg.sqrt()` per parameter
    /// (the previous one freed when the new one is bound), or
    /// `_multi_tensor_rmsprop`'s `avg = torch._foreach_sqrt(square_avgs)`,
    /// freed with the frame.
    fn rmsprop(&mut self, idx: &[usize]) -> Result<()> {
        if self.config.momentum > 0.0 {
            self.init_group(idx, &["zeros_like", "zeros_like"])?;
        } else {
            self.init_group(idx, &["zeros_like"])?;
        }
        match self.config.implementation {
            Implementation::ForLoop => {
                let mut avg: Option<Tensor> = None;
                for &i in idx {
                    let p = &self.params[i];
                    let sq = self.buffer(i, 0);
                    sq.scalar_("mul_")?;
                    let a = empty_like(sq, sq.dtype(), "sqrt", Category::Temporary)?;
                    avg = Some(a);
                    p.add_(avg.as_ref().expect("set above"), 1.0)?;
                }
                drop(avg);
            }
            Implementation::Foreach => {
                let mut avg = Vec::with_capacity(idx.len());
                for &i in idx {
                    let sq = self.buffer(i, 0);
                    sq.scalar_("_foreach_mul_")?;
                    avg.push(empty_like(
                        sq,
                        sq.dtype(),
                        "_foreach_sqrt",
                        Category::Temporary,
                    )?);
                }
                for (j, &i) in idx.iter().enumerate() {
                    self.params[i].add_(&avg[j], 1.0)?;
                }
                free_list(avg);
            }
            Implementation::Fused => unreachable!("refused by OptimizerConfig::check"),
        }
        Ok(())
    }
}

impl Optimizer {
    /// `Adafactor.step` at its defaults (`weight_decay=0`, `maximize=False`):
    /// `_init_group` makes each parameter's state, then
    /// `_single_tensor_adafactor` or `_multi_tensor_adafactor`. Every norm
    /// (`p.norm(2).item()`, `torch.norm(grad, dim=...)`) is a
    /// `linalg_vector_norm` with its reduction scratch; the matrices'
    /// variance estimate `row_var @ col_var` is as large as the parameter.
    fn adafactor(&mut self, idx: &[usize]) -> Result<()> {
        self.init_adafactor(idx)?;
        let rt = self.params[idx[0]].runtime().clone();
        rt.with_category(Category::Temporary, || match self.config.implementation {
            Implementation::ForLoop => self.adafactor_for_loop(idx),
            Implementation::Foreach => self.adafactor_foreach(idx),
            Implementation::Fused => unreachable!("refused by OptimizerConfig::check"),
        })
    }

    /// `Adafactor._init_group`: `step` (a CPU scalar), then for a gradient
    /// of more than one dim `row_var = grad.new_zeros(shape[-1] = 1)` and
    /// `col_var = grad.new_zeros(shape[-2] = 1)`, else `variance =
    /// torch.zeros_like(grad)`.
    fn init_adafactor(&mut self, idx: &[usize]) -> Result<()> {
        for &i in idx {
            if self.state[i].is_some() {
                continue;
            }
            let p = &self.params[i];
            let grad = p.grad().expect("has a grad");
            let rt = p.runtime().clone();
            let st = rt.with_category(Category::OptimizerState, || -> Result<State> {
                let step = rt.scalar_tensor(p.dtype(), Device::Cpu)?;
                let mut bufs = Vec::with_capacity(2);
                if grad.dim() > 1 {
                    let n = grad.dim();
                    for last in [n - 1, n - 2] {
                        let mut shape = grad.sizes().to_vec();
                        shape[last] = 1;
                        bufs.push(rt.empty_op(
                            &shape,
                            grad.dtype(),
                            Device::Cuda,
                            "new_zeros",
                            Category::OptimizerState,
                        )?);
                    }
                } else {
                    bufs.push(empty_like(
                        &grad,
                        grad.dtype(),
                        "zeros_like",
                        Category::OptimizerState,
                    )?);
                }
                Ok(State {
                    _step: Some(step),
                    buffers: bufs,
                })
            })?;
            self.state[i] = Some(st);
        }
        Ok(())
    }

    /// `_single_tensor_adafactor`: per parameter `param.norm(2).item()`,
    /// then a matrix's `row_mean` and `col_mean` (norms over the last and
    /// second-to-last dims), `var_estimate = row_var @ col_var` and the
    /// temporary `row_var.mean(dim=-2)`, or a vector's `grad_squared =
    /// grad * grad` and `var_estimate = variance.clone()`; `update` is
    /// `var_estimate` (in-place ops), and `update.norm(2).item()`. Each
    /// local is freed when the next parameter rebinds it (the previous
    /// `var_estimate` lives on in `update` until `update` is rebound), the
    /// rest with the frame in `co_varnames` order (`row_mean`, `col_mean`,
    /// `var_estimate`, `grad_squared`, `update`).
    fn adafactor_for_loop(&self, idx: &[usize]) -> Result<()> {
        let mut row_mean: Option<Tensor> = None;
        let mut col_mean: Option<Tensor> = None;
        let mut var_estimate: Option<Tensor> = None;
        let mut grad_squared: Option<Tensor> = None;
        let mut update: Option<Tensor> = None;
        for &i in idx {
            let p = &self.params[i];
            let grad = p.grad().expect("has a grad");
            drop(p.vector_norm(&[], false)?);
            if grad.dim() > 1 {
                let (row_var, col_var) = (self.buffer(i, 0), self.buffer(i, 1));
                row_mean = Some(grad.vector_norm(&[-1], true)?);
                col_mean = Some(grad.vector_norm(&[-2], true)?);
                var_estimate = Some(row_var.matmul(col_var)?);
                drop(row_var.mean_dims(&[-2], true)?);
            } else {
                grad_squared = Some(grad.mul(&grad)?);
                var_estimate = Some(self.buffer(i, 0).clone_tensor()?);
            }
            update = var_estimate.clone();
            drop(
                update
                    .as_ref()
                    .expect("set above")
                    .vector_norm(&[], false)?,
            );
        }
        drop(row_mean);
        drop(col_mean);
        drop(var_estimate);
        drop(grad_squared);
        drop(update);
        Ok(())
    }

    /// `_multi_tensor_adafactor`: the parameters grouped by
    /// `_group_tensors_by_device_dtype_and_is_multidim` (matrices and
    /// vectors, each group where its first parameter is), and per group
    /// the norms of the alphas, then for matrices the lists `row_means`,
    /// `col_means` (each deleted after its `_foreach_lerp_`),
    /// `var_estimates = [row_var @ col_var ...]` and `row_var_means`
    /// (deleted), for vectors `grads_squared = torch._foreach_mul(grads,
    /// grads)` (deleted) and `var_estimates = [v.clone() ...]`; the previous
    /// group's list dies when `updates` is rebound to it, before the
    /// updates' norms; the last with the frame.
    fn adafactor_foreach(&self, idx: &[usize]) -> Result<()> {
        let mut groups: Vec<(bool, Vec<usize>)> = Vec::new();
        for &i in idx {
            let multidim = self.params[i].grad().expect("has a grad").dim() > 1;
            match groups.iter_mut().find(|g| g.0 == multidim) {
                Some(g) => g.1.push(i),
                None => groups.push((multidim, vec![i])),
            }
        }
        let mut var_estimates: Vec<Tensor> = Vec::new();
        let mut updates: Vec<Tensor> = Vec::new();
        for (multidim, group) in &groups {
            let grads: Vec<Tensor> = group
                .iter()
                .map(|&i| self.params[i].grad().expect("has a grad"))
                .collect();
            for &i in group {
                drop(self.params[i].vector_norm(&[], false)?);
            }
            let new = if *multidim {
                for dim in [-1, -2] {
                    let means = grads
                        .iter()
                        .map(|g| g.vector_norm(&[dim], true))
                        .collect::<Result<Vec<_>>>()?;
                    free_list(means);
                }
                let ve = group
                    .iter()
                    .map(|&i| self.buffer(i, 0).matmul(self.buffer(i, 1)))
                    .collect::<Result<Vec<_>>>()?;
                let rvm = group
                    .iter()
                    .map(|&i| self.buffer(i, 0).mean_dims(&[-2], true))
                    .collect::<Result<Vec<_>>>()?;
                free_list(rvm);
                ve
            } else {
                let mut sq = Vec::with_capacity(grads.len());
                for g in &grads {
                    sq.push(empty_like(
                        g,
                        g.dtype(),
                        "_foreach_mul",
                        Category::Temporary,
                    )?);
                }
                free_list(sq);
                group
                    .iter()
                    .map(|&i| self.buffer(i, 0).clone_tensor())
                    .collect::<Result<Vec<_>>>()?
            };
            var_estimates = new;
            // `updates = var_estimates` (the previous group's list dies),
            // then the updates' norms
            free_list(std::mem::replace(&mut updates, var_estimates.clone()));
            for u in &updates {
                drop(u.vector_norm(&[], false)?);
            }
        }
        drop(var_estimates);
        free_list(updates);
        Ok(())
    }
}

/// A list of tensors dying with its frame: CPython frees its items last to
/// first (`list_dealloc`).
fn free_list(mut v: Vec<Tensor>) {
    while let Some(t) = v.pop() {
        drop(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Runtime;

    fn params(rt: &Runtime, n: usize) -> Vec<Tensor> {
        (0..n)
            .map(|_| {
                let p = rt.empty(&[1024, 1024], DType::F32, Device::Cuda).unwrap();
                p.requires_grad_(true).unwrap();
                p.set_grad(Some(
                    rt.empty(&[1024, 1024], DType::F32, Device::Cuda).unwrap(),
                ));
                p
            })
            .collect()
    }

    #[test]
    fn names_round_trip() {
        for k in OptimizerKind::ALL {
            assert_eq!(OptimizerKind::from_name(k.name()), Some(k));
        }
        for i in Implementation::ALL {
            assert_eq!(Implementation::from_name(i.name()), Some(i));
        }
        assert_eq!(OptimizerKind::from_name("lion"), None);
    }

    #[test]
    fn pytorch_refuses_fused_adagrad_and_rmsprop_on_cuda() {
        for kind in [OptimizerKind::Adagrad, OptimizerKind::RmsProp] {
            let c = OptimizerConfig {
                implementation: Implementation::Fused,
                ..OptimizerConfig::new(kind)
            };
            let e = c.check().unwrap_err().to_string();
            assert!(e.contains("for-loop, foreach"), "{e}");
        }
    }

    /// The step's peak above what was allocated before it, and the state
    /// left after it, in MiB (four 4 MiB parameters).
    fn step_figures(config: OptimizerConfig) -> (i64, i64) {
        let rt = Runtime::default();
        let ps = params(&rt, 4);
        let mut opt = Optimizer::new(config, ps).unwrap();
        // (the cuBLAS workspace exists, as after a training forward)
        let a = rt.empty(&[8, 8], DType::F32, Device::Cuda).unwrap();
        drop(a.mm(&a).unwrap());
        let before = rt.figures().allocated;
        rt.reset_peak_memory_stats();
        opt.step().unwrap();
        let f = rt.figures();
        ((f.peak - before) >> 20, (f.allocated - before) >> 20)
    }

    #[test]
    fn temporaries_per_implementation() {
        use Implementation::*;
        let cfg = |kind, implementation| OptimizerConfig {
            kind,
            implementation,
            momentum: 0.0,
        };
        // AdamW: two states (32 MiB); foreach adds a full sqrt list, the
        // for-loop two parameters' worth (the previous denom, sqrt, div),
        // fused nothing
        assert_eq!(step_figures(cfg(OptimizerKind::AdamW, Foreach)), (48, 32));
        assert_eq!(step_figures(cfg(OptimizerKind::AdamW, ForLoop)), (44, 32));
        assert_eq!(step_figures(cfg(OptimizerKind::AdamW, Fused)), (32, 32));
        // Adagrad's sums exist before the step: foreach's std and numerator
        assert_eq!(step_figures(cfg(OptimizerKind::Adagrad, Foreach)), (32, 0));
        assert_eq!(step_figures(cfg(OptimizerKind::Adagrad, ForLoop)), (8, 0));
        assert_eq!(step_figures(cfg(OptimizerKind::RmsProp, Foreach)), (32, 16));
        assert_eq!(step_figures(cfg(OptimizerKind::RmsProp, ForLoop)), (24, 16));
        let sgd = OptimizerConfig {
            momentum: 0.9,
            ..cfg(OptimizerKind::Sgd, Fused)
        };
        assert_eq!(step_figures(sgd), (16, 16));
        // Adafactor: a 4 KiB row and column factor per matrix; foreach's
        // variance estimates are a full list; the for-loop's peak is the
        // previous parameter's estimate (alive in `update`) and the column
        // norm's split-reduction buffer (8 MiB), then the next estimate
        assert_eq!(
            step_figures(cfg(OptimizerKind::Adafactor, Foreach)),
            (16, 0)
        );
        assert_eq!(
            step_figures(cfg(OptimizerKind::Adafactor, ForLoop)),
            (12, 0)
        );
    }

    #[test]
    fn adafactor_factors_matrices_and_keeps_a_vector_s_variance() {
        let rt = Runtime::default();
        let m = rt.empty(&[256, 512], DType::BF16, Device::Cuda).unwrap();
        let v = rt.empty(&[4096], DType::F32, Device::Cuda).unwrap();
        for p in [&m, &v] {
            p.requires_grad_(true).unwrap();
            p.set_grad(Some(p.empty_like().unwrap()));
        }
        let mut opt = Optimizer::new(
            OptimizerConfig::new(OptimizerKind::Adafactor),
            vec![m.clone(), v.clone()],
        )
        .unwrap();
        assert_eq!(
            OptimizerKind::Adafactor.default_implementation(),
            Implementation::ForLoop
        );
        opt.step().unwrap();
        let sizes: Vec<Vec<i64>> = (0..2)
            .flat_map(|i| opt.state_buffers(i).iter().map(|b| b.sizes().to_vec()))
            .collect();
        assert_eq!(sizes, [vec![256, 1], vec![1, 512], vec![4096]]);
        assert_eq!(opt.state_buffers(0)[0].dtype(), DType::BF16);
        let fused = OptimizerConfig {
            implementation: Implementation::Fused,
            ..OptimizerConfig::new(OptimizerKind::Adafactor)
        };
        assert!(fused.check().is_err());
    }
}

//! Optimizers in their default (foreach) form, with the state they create
//! lazily and the temporaries their `torch._foreach_*` calls allocate
//! (`torch/optim/sgd.py` `_multi_tensor_sgd`, `torch/optim/adam.py`
//! `_init_group` / `_multi_tensor_adam`, PyTorch 2.11).

use crate::dtype::Device;
use crate::error::Result;
use crate::ops::empty_like;
use crate::runtime::Category;
use crate::tensor::Tensor;

/// `torch.optim.SGD(params, lr, momentum, weight_decay)` (foreach).
pub struct Sgd {
    params: Vec<Tensor>,
    /// `momentum`
    pub momentum: f64,
    /// `weight_decay`
    pub weight_decay: f64,
    momentum_buffers: Vec<Option<Tensor>>,
}

impl Sgd {
    /// A new optimizer over `params`.
    pub fn new(params: Vec<Tensor>, momentum: f64, weight_decay: f64) -> Self {
        let n = params.len();
        Sgd {
            params,
            momentum,
            weight_decay,
            momentum_buffers: vec![None; n],
        }
    }

    /// `opt.step()`
    pub fn step(&mut self) -> Result<()> {
        let Some(rt) = self.params.first().map(|p| p.runtime().clone()) else {
            return Ok(());
        };
        rt.no_grad(|| -> Result<()> {
            // params with a grad, in order (grouped by device/dtype: one group here)
            let idx: Vec<usize> = (0..self.params.len())
                .filter(|&i| self.params[i].grad().is_some())
                .collect();
            let mut grads: Vec<Tensor> =
                idx.iter().filter_map(|&i| self.params[i].grad()).collect();
            if self.weight_decay != 0.0 {
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
            if self.momentum != 0.0 {
                let mut bufs = Vec::new();
                for (j, &i) in idx.iter().enumerate() {
                    match &self.momentum_buffers[i] {
                        Some(b) => {
                            b.scalar_("mul_")?;
                            bufs.push(b.clone());
                        }
                        None => {
                            // buf = device_grads[i].detach().clone()
                            let b = rt.with_category(Category::OptimizerState, || {
                                grads[j].detach().clone_tensor()
                            })?;
                            self.momentum_buffers[i] = Some(b.clone());
                            bufs.push(b);
                        }
                    }
                }
                grads = bufs;
            }
            for (j, &i) in idx.iter().enumerate() {
                self.params[i].add_(&grads[j], 1.0)?;
            }
            Ok(())
        })
    }

    /// `opt.zero_grad(set_to_none=True)`
    pub fn zero_grad(&self) {
        for p in &self.params {
            p.set_grad(None);
        }
    }
}

/// `torch.optim.Adam` / `AdamW` (foreach, not capturable, not fused).
pub struct Adam {
    params: Vec<Tensor>,
    /// decoupled weight decay (AdamW)
    pub decoupled: bool,
    /// `weight_decay` (Adam: 0, AdamW: 0.01 by default)
    pub weight_decay: f64,
    /// `amsgrad`
    pub amsgrad: bool,
    state: Vec<Option<AdamState>>,
}

/// The lazily created per-parameter state.
pub struct AdamState {
    /// `state["step"]`: a CPU scalar unless capturable/fused
    pub step: Tensor,
    /// `exp_avg` (`zeros_like(p)`)
    pub exp_avg: Tensor,
    /// `exp_avg_sq`
    pub exp_avg_sq: Tensor,
    /// `max_exp_avg_sq` (amsgrad)
    pub max_exp_avg_sq: Option<Tensor>,
}

impl Adam {
    /// `torch.optim.Adam(params)`
    #[allow(clippy::self_named_constructors)]
    pub fn adam(params: Vec<Tensor>) -> Self {
        let n = params.len();
        Adam {
            params,
            decoupled: false,
            weight_decay: 0.0,
            amsgrad: false,
            state: (0..n).map(|_| None).collect(),
        }
    }
    /// `torch.optim.AdamW(params)`
    pub fn adamw(params: Vec<Tensor>) -> Self {
        let n = params.len();
        Adam {
            params,
            decoupled: true,
            weight_decay: 0.01,
            amsgrad: false,
            state: (0..n).map(|_| None).collect(),
        }
    }

    /// The state of parameter `i`, once created.
    pub fn state(&self, i: usize) -> Option<&AdamState> {
        self.state[i].as_ref()
    }

    /// `opt.step()`
    pub fn step(&mut self) -> Result<()> {
        let Some(rt) = self.params.first().map(|p| p.runtime().clone()) else {
            return Ok(());
        };
        rt.no_grad(|| -> Result<()> {
            // _init_group
            let mut idx = Vec::new();
            for i in 0..self.params.len() {
                let p = &self.params[i];
                if p.grad().is_none() {
                    continue;
                }
                idx.push(i);
                if self.state[i].is_none() {
                    let st =
                        rt.with_category(Category::OptimizerState, || -> Result<AdamState> {
                            let step = rt.scalar_tensor(p.dtype(), Device::Cpu)?;
                            let exp_avg =
                                empty_like(p, p.dtype(), "zeros_like", Category::OptimizerState)?;
                            let exp_avg_sq =
                                empty_like(p, p.dtype(), "zeros_like", Category::OptimizerState)?;
                            let max = if self.amsgrad {
                                Some(empty_like(
                                    p,
                                    p.dtype(),
                                    "zeros_like",
                                    Category::OptimizerState,
                                )?)
                            } else {
                                None
                            };
                            Ok(AdamState {
                                step,
                                exp_avg,
                                exp_avg_sq,
                                max_exp_avg_sq: max,
                            })
                        })?;
                    self.state[i] = Some(st);
                }
            }
            // _multi_tensor_adam: one device/dtype group
            let mut grads: Vec<Tensor> =
                idx.iter().filter_map(|&i| self.params[i].grad()).collect();
            if self.weight_decay != 0.0 {
                if self.decoupled {
                    for &i in &idx {
                        self.params[i].scalar_("_foreach_mul_")?;
                    }
                } else {
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
                let st = self.state[i].as_ref().expect("initialised above");
                st.exp_avg.add_(&grads[j], 1.0)?; // _foreach_lerp_
                st.exp_avg_sq.scalar_("_foreach_mul_")?;
            }
            drop(grads);
            // exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)
            let mut sqrt = Vec::with_capacity(idx.len());
            for &i in &idx {
                let st = self.state[i].as_ref().expect("initialised above");
                let src = st.max_exp_avg_sq.as_ref().unwrap_or(&st.exp_avg_sq);
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
            // the list dies with the frame: CPython frees its items last to first
            while let Some(t) = sqrt.pop() {
                drop(t);
            }
            Ok(())
        })
    }

    /// `opt.zero_grad(set_to_none=True)`
    pub fn zero_grad(&self) {
        for p in &self.params {
            p.set_grad(None);
        }
    }
}

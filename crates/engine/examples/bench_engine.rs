//! Throughput of the eager twin: simulated ops per second on one core.
//!
//! `cargo run --release -p vramscope-engine --example bench_engine`
//!
//! Workloads: (1) pointwise ops with autograd recording and their frees,
//! (2) forward + backward of an MLP step (`Linear`/`GELU`, MSE loss, SGD),
//! counting each forward op and each executed backward node as one op.

use std::time::Instant;

use vramscope_engine::nn::{Activation, Linear, MSELoss, Module, Sequential};
use vramscope_engine::optim::Optimizer;
use vramscope_engine::{DType, Device, Runtime};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1) pointwise chain with autograd
    let rt = Runtime::default();
    let x = rt.randn(&[1024, 1024], DType::F32, Device::Cuda)?;
    x.requires_grad_(true)?;
    let n = 200_000u64;
    let t0 = Instant::now();
    for _ in 0..n / 4 {
        let a = &x * 2.0; // MulBackward0
        let b = &a + &x; // AddBackward0
        let c = b.exp()?; // ExpBackward0 (saves result)
        let d = &c - 1.0; // SubBackward0
        drop((a, b, c, d));
    }
    let dt = t0.elapsed().as_secs_f64();
    println!(
        "pointwise+autograd: {n} ops in {dt:.3} s = {:.2} M ops/s",
        n as f64 / dt / 1e6
    );

    // 2) training steps of a small MLP
    let mut model = Sequential {
        modules: vec![
            Box::new(Linear::new(&rt, 256, 256, true)?),
            Box::new(Activation::GELU),
            Box::new(Linear::new(&rt, 256, 256, true)?),
            Box::new(Activation::GELU),
            Box::new(Linear::new(&rt, 256, 10, true)?),
        ],
    };
    model.cuda()?;
    let mut opt = Optimizer::sgd(model.parameters(), 0.9).unwrap();
    let inp = rt.randn(&[64, 256], DType::F32, Device::Cuda)?;
    let target = rt.randn(&[64, 10], DType::F32, Device::Cuda)?;
    let steps = 20_000u64;
    let t0 = Instant::now();
    for _ in 0..steps {
        let out = model.forward(&inp)?;
        let loss = MSELoss.forward(&out, &target)?;
        drop(out);
        loss.backward()?;
        opt.step()?;
        opt.zero_grad();
    }
    let dt = t0.elapsed().as_secs_f64();
    // forward: 3 x (t + addmm) + 2 gelu + mse = 9; backward: 9 nodes + 6 AccumulateGrad;
    // step: 6 in-place adds
    let per_step = 9 + 15 + 6;
    let ops = steps * per_step;
    println!(
        "MLP train step: {steps} steps ({ops} ops) in {dt:.3} s = {:.2} M ops/s",
        ops as f64 / dt / 1e6
    );
    println!(
        "allocator: {} bytes allocated at the end",
        rt.memory_allocated()
    );
    Ok(())
}

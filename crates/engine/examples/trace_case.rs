//! Print the allocator trace of the `snapshot` seed case (action, size per
//! line), to compare with a real `torch.cuda.memory._dump_snapshot`.

use vramscope_engine::nn::{Module, TransformerEncoderLayer};
use vramscope_engine::optim::Optimizer;
use vramscope_engine::{DType, Device, Runtime};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rt = Runtime::default();
    rt.record_memory_history(true);
    let mut enc = TransformerEncoderLayer::new(&rt, 1024, 16, 4096, 0.1, true, false)?;
    enc.cuda()?;
    let mut opt = Optimizer::adamw(enc.parameters());
    let ex = rt.randn(&[8, 512, 1024], DType::F32, Device::Cuda)?;
    let mut loss = None;
    for _ in 0..3 {
        let l = {
            let y = enc.forward(&ex)?;
            let sq = y.square()?;
            drop(y);
            sq.mean()?
        };
        loss = Some(l);
        loss.as_ref().expect("set").backward()?;
        opt.step()?;
        opt.zero_grad();
    }
    for e in rt.trace() {
        println!("{} {}", e.action.as_str(), e.size);
    }
    drop(loss);
    Ok(())
}

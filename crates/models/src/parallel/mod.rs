//! Data parallelism over N GPUs, as one rank sees it: FSDP2
//! (`torch.distributed.fsdp.fully_shard`, [`fsdp`]) and
//! `DistributedDataParallel` ([`ddp`]) wrapping the model the families
//! build. Each rank is one process on its own GPU; the twin runs the rank's
//! program (its shards or replicas, its collectives' buffers, its streams)
//! on that rank's allocator.

pub mod ddp;
pub mod fsdp;
pub(crate) mod nccl;

pub use ddp::DdpConfig;
pub use fsdp::FsdpConfig;

/// How the model is parallelised.
#[derive(Debug, Clone, PartialEq)]
pub enum Parallel {
    /// `fully_shard` on every decoder layer, then on the model
    Fsdp(FsdpConfig),
    /// `DistributedDataParallel(model)`
    Ddp(DdpConfig),
}

impl Parallel {
    /// The number of ranks.
    pub fn world(&self) -> i64 {
        match self {
            Parallel::Fsdp(c) => c.world,
            Parallel::Ddp(c) => c.world,
        }
    }
}

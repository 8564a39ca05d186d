//! Data parallelism over N GPUs, as one rank sees it: FSDP2
//! (`torch.distributed.fsdp.fully_shard`, [`fsdp`]) wrapping the model the
//! families build. Each rank is one process on its own GPU; the twin runs
//! the rank's program (its shards, its collectives' buffers, its streams)
//! on that rank's allocator.

pub mod fsdp;

pub use fsdp::FsdpConfig;

/// How the model is parallelised.
#[derive(Debug, Clone, PartialEq)]
pub enum Parallel {
    /// `fully_shard` on every decoder layer, then on the model
    Fsdp(FsdpConfig),
}

impl Parallel {
    /// The number of ranks.
    pub fn world(&self) -> i64 {
        match self {
            Parallel::Fsdp(c) => c.world,
        }
    }
}

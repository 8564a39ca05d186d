//! The integer-keyed hash maps of the eager twin: the allocator twin's
//! hasher (`vramscope_alloc::inthash`).

pub(crate) use vramscope_alloc::inthash::FastMap;

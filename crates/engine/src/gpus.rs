//! Every GPU the twin knows, as data: one [`GpuSpec`] per GPU holding each
//! platform constant the twin uses, each with its source and a [`Grade`]
//! (measured here, from PyTorch's source, from NVIDIA's specifications, or
//! estimated). [`GpuSpec::profile`] turns one into the [`DeviceProfile`]
//! the runtime reads; the rules that follow from the compute capability
//! alone (cuBLAS workspaces, SDPA backends) are PyTorch's, in
//! [`blas_workspace_sizes`] and [`SdpaSupport::of`].
//!
//! A new GPU is one more entry in [`GPUS`].

/// How far a constant can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Grade {
    /// measured on this GPU with PyTorch 2.11 (`fixtures/`)
    Measured,
    /// PyTorch 2.11's own rule, read in its source
    PyTorchSource,
    /// NVIDIA's published specification of the GPU
    Specified,
    /// no measurement on this GPU: taken from a measured one, or from a
    /// public report of `torch.cuda.get_device_properties()`
    Estimated,
}

impl Grade {
    /// How a report names it.
    pub fn label(self) -> &'static str {
        match self {
            Grade::Measured => "measured",
            Grade::PyTorchSource => "from PyTorch's source",
            Grade::Specified => "from NVIDIA's specifications",
            Grade::Estimated => "estimated",
        }
    }
}

/// Where a constant comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Provenance {
    /// how far it can be trusted
    pub grade: Grade,
    /// the fixture, source file or document it comes from
    pub source: &'static str,
}

/// A constant and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sourced<T> {
    /// the value
    pub value: T,
    /// where it comes from
    pub from: Provenance,
}

const fn measured<T>(value: T, source: &'static str) -> Sourced<T> {
    Sourced {
        value,
        from: Provenance {
            grade: Grade::Measured,
            source,
        },
    }
}

const fn specified<T>(value: T, source: &'static str) -> Sourced<T> {
    Sourced {
        value,
        from: Provenance {
            grade: Grade::Specified,
            source,
        },
    }
}

const fn estimated<T>(value: T, source: &'static str) -> Sourced<T> {
    Sourced {
        value,
        from: Provenance {
            grade: Grade::Estimated,
            source,
        },
    }
}

/// The grade of every constant group of a [`DeviceProfile`], for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grades {
    /// `cudaMemGetInfo`'s total
    pub total_memory: Provenance,
    /// the CUDA context, outside the allocator
    pub context: Provenance,
    /// SM count and threads per SM (reduction grids, attention splits)
    pub sm: Provenance,
    /// the driver's memory for each cuBLAS handle and 16-bit kernels
    pub blas_handles: Provenance,
    /// cuBLAS / cuBLASLt workspace sizes
    pub blas_workspace: Provenance,
    /// which SDPA backends run
    pub sdpa: Provenance,
    /// cuDNN's convolution workspaces
    pub cudnn: Provenance,
    /// CUB's temporary storage (embedding backward, cumsum)
    pub cub: Provenance,
    /// where the CUDA driver places segments (ties between equal blocks)
    pub placement: Provenance,
}

impl Grades {
    /// Every group: its JSON key, its name as a report prints it, where
    /// it comes from.
    pub fn named(&self) -> [(&'static str, &'static str, Provenance); 9] {
        [
            ("total_memory", "total memory", self.total_memory),
            ("cuda_context", "CUDA context", self.context),
            ("sm_count", "SM count", self.sm),
            (
                "cublas_handles",
                "cuBLAS handles' driver memory",
                self.blas_handles,
            ),
            (
                "cublas_workspaces",
                "cuBLAS workspaces",
                self.blas_workspace,
            ),
            ("sdpa_backends", "SDPA backends", self.sdpa),
            ("cudnn_workspaces", "cuDNN workspaces", self.cudnn),
            ("cub_scratch", "CUB scratch", self.cub),
            ("driver_placement", "driver placement", self.placement),
        ]
    }

    /// The names of the groups graded [`Grade::Estimated`].
    pub fn estimated(&self) -> Vec<&'static str> {
        self.named()
            .into_iter()
            .filter(|(_, _, p)| p.grade == Grade::Estimated)
            .map(|(_, n, _)| n)
            .collect()
    }
}

/// Which scaled-dot-product-attention backends a GPU can run
/// (`aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`, 2.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdpaSupport {
    /// `check_flash_attention_hardware_support`: sm80..=sm121
    pub flash: bool,
    /// `check_mem_efficient_hardware_support`: sm50..=sm121
    pub efficient: bool,
    /// `check_cudnn_hardware_support`: sm80..=sm121
    pub cudnn: bool,
    /// `check_prefer_cudnn_attention`: cuDNN first on sm 9.0, 9.3, 10.0,
    /// 10.3 (cuDNN > 9.15, as the cu130 wheels bundle)
    pub prefers_cudnn: bool,
    /// `check_cudnn_tensor_shapes`: head dims up to 256 on sm 9.0 exactly
    /// (cuDNN >= 9.10), else 128 (192 for (192, 128) on sm 10.x)
    pub cudnn_hopper_head_dim: bool,
    /// the memory-efficient kernel takes bf16 (`check_dtypes_low_precision`
    /// and its dtype lists: bf16 from sm80)
    pub bf16: bool,
    /// `check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120`:
    /// flash does not train head dims in (192, 224], nor above 224 with
    /// dropout, on sm86..=sm89 and sm120..=sm121
    pub flash_head_dim_192_limit: bool,
}

impl SdpaSupport {
    /// The backends of a GPU of compute capability `cap`.
    pub fn of(cap: (u32, u32)) -> Self {
        let within = |lo: (u32, u32), hi: (u32, u32)| cap >= lo && cap <= hi;
        SdpaSupport {
            flash: within((8, 0), (12, 1)),
            efficient: within((5, 0), (12, 1)),
            cudnn: within((8, 0), (12, 1)),
            prefers_cudnn: matches!(cap.0, 9 | 10) && matches!(cap.1, 0 | 3),
            cudnn_hopper_head_dim: cap == (9, 0),
            bf16: cap.0 >= 8,
            flash_head_dim_192_limit: within((8, 6), (8, 9)) || within((12, 0), (12, 1)),
        }
    }
}

/// cuBLAS / cuBLASLt workspace sizes by (compute capability, torch version),
/// from `aten/src/ATen/cuda/CublasHandlePool.cpp`:
/// - `parseChosenWorkspaceSize()`: `:4096:2:16:8` = 4096 KiB x 2 + 16 KiB x 8
///   = 8,519,680 bytes by default, but `4096 * 8 * 1024` = 32 MiB when
///   `properties->major == 9 && properties->minor == 0` (Hopper), torch >= 2.4.
///   The 2.11.0+cu130 wheel's `libtorch_cuda.so` compares (major, minor)
///   with (9, 0) as one 64-bit word: Blackwell's 32 MiB (pytorch#175344)
///   came after 2.11.
/// - `parseCUDABlasLtWorkspaceSize()`: `CUBLASLT_WORKSPACE_SIZE` default 1024 KiB.
///   In 2.11 `getCUDABlasLtWorkspace()` shares the cuBLAS workspace only when
///   `TORCH_CUBLASLT_UNIFIED_WORKSPACE=1` is set explicitly; by default it
///   allocates its own 1 MiB per (handle, stream) through the caching allocator
///   (seen as the 1,048,576-byte allocation under `getCUDABlasLtWorkspace` in the
///   H100 snapshot, right after the first `addmm` output).
pub fn blas_workspace_sizes(capability: (u32, u32), torch: &str) -> BlasWorkspaces {
    let mut it = torch.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let version = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    // 2.11 is verified against the H100 truth; the release that introduced
    // the Hopper default is taken as 2.4
    let modern = version >= (2, 4);
    let cublas = if modern && capability == (9, 0) {
        4096 * 8 * 1024
    } else {
        4096 * 1024 * 2 + 16 * 1024 * 8
    };
    BlasWorkspaces {
        cublas,
        cublas_lt: 1024 * 1024,
    }
}

/// The workspace sizes of [`blas_workspace_sizes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlasWorkspaces {
    /// per (handle, stream): `getChosenWorkspaceSize()`
    pub cublas: u64,
    /// per (handle, stream): `getCUDABlasLtWorkspaceSize()`
    pub cublas_lt: u64,
}

/// Device memory the CUDA driver takes outside the allocator when the
/// process creates a cuBLAS handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlasHandleBytes {
    /// at the process's first handle
    pub first: u64,
    /// at each later one (the autograd thread's)
    pub later: u64,
}

/// The GPU and library versions whose constants the twin uses: what
/// [`GpuSpec::profile`] makes of a GPU's entry.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceProfile {
    /// the `--gpu` key (`h100`, `a100-80gb`, `custom`, ...)
    pub key: &'static str,
    /// `torch.cuda.get_device_name()`
    pub name: &'static str,
    /// compute capability (major, minor)
    pub capability: (u32, u32),
    /// `torch.__version__` the constants come from
    pub torch: &'static str,
    /// `multiProcessorCount`
    pub sm_count: u32,
    /// `maxThreadsPerMultiProcessor`
    pub max_threads_per_sm: u32,
    /// `l2CacheSize` (`get_device_properties().L2_cache_size`), bytes
    pub l2_cache_bytes: u64,
    /// bytes `cudaMemGetInfo` reports as total
    pub total_memory: u64,
    /// bytes the allocator can obtain (total less what the process holds
    /// outside the allocator once the model is loaded: the CUDA context)
    pub usable_memory: u64,
    /// device memory the driver takes, outside the allocator, when the
    /// process creates its first cuBLAS handle, and when it creates each
    /// later one (the autograd thread's): the handles' state, the local
    /// memory of the kernels they launch, the modules loaded
    pub blas_handle_bytes: BlasHandleBytes,
    /// what the driver takes more at a thread's first 16-bit matmul (bf16
    /// measured, fp16 taken alike): the 16-bit kernels
    pub blas_16bit_bytes: u64,
    /// cuBLAS workspace per (handle, stream)
    pub cublas_workspace: u64,
    /// cuBLASLt workspace per (handle, stream)
    pub cublaslt_workspace: u64,
    /// the SDPA backends it runs
    pub sdpa: SdpaSupport,
    /// the measured cuDNN workspace tables (convolutions) hold for it
    pub cudnn_tables: bool,
    /// convolution problems where this GPU takes another cuDNN plan than the
    /// sm_90 table's, in the table's line format (checked before it)
    pub cudnn_own_plans: &'static str,
    /// the compute capability whose CUB tuning policies size CUB's
    /// temporary storage (only sm_90's are modelled)
    pub cub_policies: (u32, u32),
    /// where each constant comes from
    pub grades: Grades,
}

impl DeviceProfile {
    /// NVIDIA H100 80GB HBM3 (sm_90) with PyTorch 2.11.0+cu130: the machine
    /// the ground truth in `fixtures/seeds` was measured on.
    pub fn h100_torch_2_11() -> Self {
        H100.profile()
    }

    /// NVIDIA H200 (sm_90) with PyTorch 2.11.0+cu130 ([`H200`]).
    pub fn h200_torch_2_11() -> Self {
        H200.profile()
    }

    /// The bytes outside the allocator once the model is loaded: the CUDA
    /// context.
    pub fn context_bytes(&self) -> u64 {
        self.total_memory - self.usable_memory
    }
}

/// One GPU: every platform constant the twin uses, each with its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuSpec {
    /// the `--gpu` key
    pub key: &'static str,
    /// `torch.cuda.get_device_name()`
    pub name: &'static str,
    /// compute capability (major, minor), from NVIDIA's specifications
    pub capability: (u32, u32),
    /// `multiProcessorCount`
    pub sm_count: Sourced<u32>,
    /// `maxThreadsPerMultiProcessor`
    pub max_threads_per_sm: Sourced<u32>,
    /// `l2CacheSize` (`get_device_properties().L2_cache_size`), bytes
    pub l2_cache_bytes: Sourced<u64>,
    /// `cudaMemGetInfo`'s total (`get_device_properties().total_memory`)
    pub total_memory: Sourced<u64>,
    /// `total - free - reserved` after loading a model: the CUDA context
    pub context_bytes: Sourced<u64>,
    /// the driver's memory at the first cuBLAS handle and at each later one
    pub blas_handle_bytes: Sourced<BlasHandleBytes>,
    /// the driver's memory at a thread's first 16-bit matmul
    pub blas_16bit_bytes: Sourced<u64>,
    /// the measured cuDNN tables hold for it
    pub cudnn_tables: Sourced<bool>,
    /// its own cuDNN plans where the sm_90 table's are another GPU's
    pub cudnn_own_plans: &'static str,
    /// the CUB policies the twin sizes its scratch with
    pub cub_policies: Sourced<(u32, u32)>,
    /// the CUDA driver's segment placement rule (`vramscope_alloc`'s
    /// `driver_va.rs`)
    pub placement: Provenance,
}

impl GpuSpec {
    /// The profile the runtime uses.
    pub fn profile(&self) -> DeviceProfile {
        const TORCH: &str = "2.11.0";
        let workspaces = blas_workspace_sizes(self.capability, TORCH);
        let source = |s| Provenance {
            grade: Grade::PyTorchSource,
            source: s,
        };
        DeviceProfile {
            key: self.key,
            name: self.name,
            capability: self.capability,
            torch: TORCH,
            sm_count: self.sm_count.value,
            max_threads_per_sm: self.max_threads_per_sm.value,
            l2_cache_bytes: self.l2_cache_bytes.value,
            total_memory: self.total_memory.value,
            usable_memory: self
                .total_memory
                .value
                .saturating_sub(self.context_bytes.value),
            blas_handle_bytes: self.blas_handle_bytes.value,
            blas_16bit_bytes: self.blas_16bit_bytes.value,
            cublas_workspace: workspaces.cublas,
            cublaslt_workspace: workspaces.cublas_lt,
            sdpa: SdpaSupport::of(self.capability),
            cudnn_tables: self.cudnn_tables.value,
            cudnn_own_plans: self.cudnn_own_plans,
            cub_policies: self.cub_policies.value,
            grades: Grades {
                total_memory: self.total_memory.from,
                context: self.context_bytes.from,
                sm: self.sm_count.from,
                blas_handles: self.blas_handle_bytes.from,
                blas_workspace: source("CublasHandlePool.cpp parseChosenWorkspaceSize"),
                sdpa: source("sdp_utils.cpp hardware and dtype checks"),
                cudnn: self.cudnn_tables.from,
                cub: self.cub_policies.from,
                placement: self.placement,
            },
        }
    }

    /// `--gpu custom --memory BYTES`: a GPU of `total_memory` bytes and
    /// compute capability `capability`, every other constant the H100's
    /// (graded estimated, the total as given).
    pub fn custom(total_memory: u64, capability: (u32, u32)) -> GpuSpec {
        let guess = "the H100's, for want of a measurement";
        let h = H100;
        GpuSpec {
            key: "custom",
            name: "custom GPU",
            capability,
            sm_count: estimated(h.sm_count.value, guess),
            max_threads_per_sm: estimated(h.max_threads_per_sm.value, guess),
            l2_cache_bytes: estimated(h.l2_cache_bytes.value, guess),
            total_memory: Sourced {
                value: total_memory,
                from: Provenance {
                    grade: Grade::Measured,
                    source: "given with --memory",
                },
            },
            context_bytes: estimated(h.context_bytes.value, guess),
            blas_handle_bytes: estimated(h.blas_handle_bytes.value, guess),
            blas_16bit_bytes: estimated(h.blas_16bit_bytes.value, guess),
            cudnn_tables: estimated(false, NO_CUDNN_TABLES),
            cudnn_own_plans: "",
            cub_policies: estimated((9, 0), CUB_GUESS),
            placement: ESTIMATED_PLACEMENT,
        }
    }
}

/// The CUDA context and the driver's share per cuBLAS handle and for
/// 16-bit kernels, measured on the H100 and the H200 as `total - free -
/// reserved` (`cudaMemGetInfo`) phase by phase: `fixtures/plan`
/// (`wholecard_plan_h100.jsonl`) and `fixtures/driver_share/README.md`.
const HOPPER_CONTEXT: u64 = 554_500_096;
const HOPPER_HANDLES: BlasHandleBytes = BlasHandleBytes {
    first: 158 * 1024 * 1024,
    later: 64 * 1024 * 1024,
};
const HOPPER_16BIT: u64 = 8 * 1024 * 1024;

/// The estimate for a GPU the driver-share constants were not measured on.
const CONTEXT_GUESS: &str =
    "the H100's and H200's 528.81 MiB; the context varies with the GPU and driver";
const HANDLES_GUESS: &str = "the H100's and H200's (158 and 64 MiB, 8 MiB for 16-bit kernels)";
const NO_CUDNN_TABLES: &str =
    "cuDNN workspaces measured on sm_90 only: a convolution here is taken as 0 bytes and named as unmeasured";
const CUB_GUESS: &str =
    "CUB's sm_90 tuning policies (tile sizes differ per GPU: a few KiB of scratch)";
const ESTIMATED_PLACEMENT: Provenance = Provenance {
    grade: Grade::Estimated,
    source: "the rule read off the H100 and H200 traces (driver 580.159)",
};
const SPEC_SM: &str = "NVIDIA's specifications";
const SPEC_THREADS: &str = "CUDA C++ Programming Guide, compute capability table";

/// Where the H100 takes another cuDNN plan than the H200 whose bytes the sm_90
/// table holds (the same wheel and cuDNN 91900, heuristics mode): its forward of
/// the first problem is 294,912 N + 1,327,251 bytes at every batch measured, the
/// H200's 22,298,867 at 64 and 43,270,451 at 128 (fixtures/run/README.md,
/// session 67: probe nc67 and blind113/di06 on the H100). DCGAN's 4th
/// discriminator convolution at batch 128 in bfloat16 channels-last (and its
/// generator's transposed twin's dgrad, the same cuDNN graph) takes no workspace
/// on the H100, 524,479 bytes on the H200 (blind297/kl02's H100 memory history,
/// session 68: none at any of its 66 calls).
const H100_CUDNN_PLANS: &str =
    "forward bfloat16 nchw 0 384,16,16 192,384,3,3 1,1 1,1 1,1 0,0 1 | 64:20201619 128:39075987
forward bfloat16 nhwc 0 256,8,8 512,256,4,4 2,2 1,1 1,1 0,0 1 | 128:0
dgrad bfloat16 nhwc 1 512,4,4 512,256,4,4 2,2 1,1 1,1 0,0 1 | 128:0
dgrad float16 nhwc 0 128,16,16 128,128,3,3 1,1 1,1 1,1 0,0 1 | 16:0";

/// NVIDIA H100 80GB HBM3 (sm_90), measured.
pub const H100: GpuSpec = GpuSpec {
    key: "h100",
    name: "NVIDIA H100 80GB HBM3",
    capability: (9, 0),
    sm_count: measured(132, "torch.cuda.get_device_properties on the H100"),
    max_threads_per_sm: specified(2048, SPEC_THREADS),
    l2_cache_bytes: specified(50 * MIB, "NVIDIA's H100 SXM5 specification: 50 MB of L2"),
    total_memory: measured(85_017_493_504, "cudaMemGetInfo on the H100 (fixtures/plan)"),
    context_bytes: measured(HOPPER_CONTEXT, "fixtures/plan/wholecard_plan_h100.jsonl"),
    blas_handle_bytes: measured(HOPPER_HANDLES, "fixtures/plan/wholecard_plan_h100.jsonl"),
    blas_16bit_bytes: measured(HOPPER_16BIT, "fixtures/plan/wholecard_plan_h100.jsonl"),
    cudnn_tables: measured(true, "fixtures/ops/conv_workspace_h100.jsonl.xz"),
    cudnn_own_plans: H100_CUDNN_PLANS,
    cub_policies: measured((9, 0), "fixtures/ops/cub_scan_h100.jsonl"),
    placement: Provenance {
        grade: Grade::Measured,
        source: "fixtures/alloc traces (driver 580.159)",
    },
};

/// NVIDIA H200 (sm_90, 132 SMs, as the H100) with PyTorch 2.11.0+cu130,
/// measured (`fixtures/h200/README.md`): everything but the total memory is
/// the H100's.
pub const H200: GpuSpec = GpuSpec {
    key: "h200",
    name: "NVIDIA H200",
    sm_count: measured(132, "torch.cuda.get_device_properties on the H200"),
    l2_cache_bytes: measured(
        60 * MIB,
        "Inductor's benchmark buffer of L2_cache_size // 4 ints: 62,914,560 bytes on the H200 (fixtures/run)",
    ),
    total_memory: measured(
        150_109_880_320,
        "cudaMemGetInfo on the H200 (fixtures/h200)",
    ),
    context_bytes: measured(HOPPER_CONTEXT, "fixtures/h200 (driver_share_cases.json)"),
    blas_handle_bytes: measured(HOPPER_HANDLES, "fixtures/h200 (driver_share_cases.json)"),
    blas_16bit_bytes: measured(HOPPER_16BIT, "fixtures/h200 (driver_share_cases.json)"),
    cudnn_tables: measured(true, "fixtures/h200/conv_workspace_h200.jsonl.xz"),
    cudnn_own_plans: "",
    cub_policies: measured((9, 0), "fixtures/run/truth_h200.tar.xz"),
    placement: Provenance {
        grade: Grade::Measured,
        source: "fixtures/alloc/segment_placement_h200.txt",
    },
    ..H100
};

/// A GPU nobody measured here: its SM count and capability from NVIDIA,
/// its total from a public report, the driver's shares the H100's.
const fn unmeasured(
    key: &'static str,
    name: &'static str,
    capability: (u32, u32),
    sm_count: u32,
    max_threads_per_sm: u32,
    l2_cache_bytes: Sourced<u64>,
    total_memory: Sourced<u64>,
) -> GpuSpec {
    GpuSpec {
        key,
        name,
        capability,
        sm_count: specified(sm_count, SPEC_SM),
        max_threads_per_sm: specified(max_threads_per_sm, SPEC_THREADS),
        l2_cache_bytes,
        total_memory,
        context_bytes: estimated(HOPPER_CONTEXT, CONTEXT_GUESS),
        blas_handle_bytes: estimated(HOPPER_HANDLES, HANDLES_GUESS),
        blas_16bit_bytes: estimated(HOPPER_16BIT, HANDLES_GUESS),
        cudnn_tables: estimated(false, NO_CUDNN_TABLES),
        cudnn_own_plans: "",
        cub_policies: estimated((9, 0), CUB_GUESS),
        placement: ESTIMATED_PLACEMENT,
    }
}

const MIB: u64 = 1024 * 1024;
/// `total_memory=...MB` of a public `get_device_properties()` printout
/// (MiB; the driver's exact total varies by a few MiB).
const REPORTED: &str = "a public torch.cuda.get_device_properties() printout";
/// `Total amount of global memory: ... bytes` of a public `deviceQuery`.
const DEVICE_QUERY: &str = "a public deviceQuery printout (totalGlobalMem)";
/// `L2 Cache Size: ... bytes` of a public `deviceQuery`.
const DEVICE_QUERY_L2: &str = "a public deviceQuery printout (L2 Cache Size)";
/// NVIDIA's L2 sizes (MB of 2^20 bytes, as the H100's 50 MB is 52,428,800
/// bytes of `l2CacheSize`).
const SPEC_L2_AMPERE: &str = "NVIDIA Ampere GA100/GA102 architecture whitepapers";
const SPEC_L2_ADA: &str = "NVIDIA Ada GPU architecture whitepaper and datasheets";

/// Every GPU `--gpu` takes, H100 first (the default).
pub static GPUS: &[GpuSpec] = &[
    H100,
    H200,
    unmeasured(
        "a100-40gb",
        "NVIDIA A100-SXM4-40GB",
        (8, 0),
        108,
        2048,
        specified(40 * MIB, SPEC_L2_AMPERE),
        estimated(42_405_855_232, DEVICE_QUERY),
    ),
    unmeasured(
        "a100-80gb",
        "NVIDIA A100-SXM4-80GB",
        (8, 0),
        108,
        2048,
        specified(40 * MIB, SPEC_L2_AMPERE),
        estimated(
            85_017_493_504,
            "the H100 80GB's measured total (the same 80 GB of HBM)",
        ),
    ),
    unmeasured(
        "l40s",
        "NVIDIA L40S",
        (8, 9),
        142,
        1536,
        specified(96 * MIB, SPEC_L2_ADA),
        estimated(45_589 * MIB, REPORTED),
    ),
    unmeasured(
        "l4",
        "NVIDIA L4",
        (8, 9),
        58,
        1536,
        specified(48 * MIB, SPEC_L2_ADA),
        estimated(
            22_554 * MIB + MIB / 2,
            "nvidia-smi's 23,034 MiB less the H100's gap between nvidia-smi and cudaMemGetInfo (479.5 MiB)",
        ),
    ),
    unmeasured(
        "a10g",
        "NVIDIA A10G",
        (8, 6),
        80,
        1536,
        specified(6 * MIB, SPEC_L2_AMPERE),
        estimated(22_587 * MIB, REPORTED),
    ),
    unmeasured(
        "rtx4090",
        "NVIDIA GeForce RTX 4090",
        (8, 9),
        128,
        1536,
        specified(72 * MIB, SPEC_L2_ADA),
        estimated(24_563 * MIB, REPORTED),
    ),
    unmeasured(
        "rtx3090",
        "NVIDIA GeForce RTX 3090",
        (8, 6),
        82,
        1536,
        specified(6 * MIB, SPEC_L2_AMPERE),
        estimated(24_268 * MIB, REPORTED),
    ),
    unmeasured(
        "t4",
        "Tesla T4",
        (7, 5),
        40,
        1024,
        estimated(4 * MIB, DEVICE_QUERY_L2),
        estimated(15_843_721_216, DEVICE_QUERY),
    ),
    unmeasured(
        "v100",
        "Tesla V100-SXM2-16GB",
        (7, 0),
        80,
        2048,
        specified(6 * MIB, "NVIDIA Tesla V100 GPU architecture whitepaper: 6144 KB of L2"),
        estimated(16_160 * MIB, REPORTED),
    ),
    unmeasured(
        "b200",
        "NVIDIA B200",
        (10, 0),
        148,
        2048,
        estimated(50 * MIB, "the H100's, for want of a source"),
        estimated(182_631 * MIB, REPORTED),
    ),
];

/// The GPU whose key (or name, ignoring case, `-` and `_`) is `key`.
pub fn gpu(key: &str) -> Option<&'static GpuSpec> {
    let norm = |s: &str| {
        s.chars()
            .filter(|c| !matches!(c, '-' | '_' | ' '))
            .flat_map(char::to_lowercase)
            .collect::<String>()
    };
    let k = norm(key);
    GPUS.iter().find(|g| norm(g.key) == k || norm(g.name) == k)
}

/// The keys `--gpu` takes, comma-separated, `custom` last.
pub fn gpu_keys() -> String {
    let mut v: Vec<&str> = GPUS.iter().map(|g| g.key).collect();
    v.push("custom");
    v.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The H100's and H200's profiles are the constants the fixtures were
    /// matched with.
    #[test]
    fn hopper_profiles_keep_their_constants() {
        let h = DeviceProfile::h100_torch_2_11();
        assert_eq!(h.total_memory, 85_017_493_504);
        assert_eq!(h.usable_memory, 85_017_493_504 - 554_500_096);
        assert_eq!(h.cublas_workspace, 32 << 20);
        assert_eq!(h.cublaslt_workspace, 1 << 20);
        assert_eq!(
            h.blas_handle_bytes,
            BlasHandleBytes {
                first: 158 << 20,
                later: 64 << 20
            }
        );
        assert!(h.cudnn_tables && h.sdpa.prefers_cudnn && h.sdpa.cudnn_hopper_head_dim);
        assert!(h.grades.estimated().is_empty());
        let h2 = DeviceProfile::h200_torch_2_11();
        assert_eq!(h2.usable_memory, 150_109_880_320 - 554_500_096);
        assert_eq!((h2.sm_count, h2.capability), (132, (9, 0)));
    }

    /// `L2_cache_size`: the H100's 50 MB specification, the H200's 60 MiB
    /// measured; every GPU has one, smaller than its memory.
    #[test]
    fn l2_cache_by_gpu() {
        assert_eq!(DeviceProfile::h100_torch_2_11().l2_cache_bytes, 52_428_800);
        assert_eq!(DeviceProfile::h200_torch_2_11().l2_cache_bytes, 62_914_560);
        assert_eq!(H200.l2_cache_bytes.from.grade, Grade::Measured);
        assert_eq!(gpu("t4").unwrap().profile().l2_cache_bytes, 4_194_304);
        assert_eq!(gpu("a100-80gb").unwrap().profile().l2_cache_bytes, 40 << 20);
        for g in GPUS {
            let p = g.profile();
            assert!(
                p.l2_cache_bytes >= 4 << 20 && p.l2_cache_bytes < p.total_memory,
                "{}",
                g.key
            );
        }
        let c = GpuSpec::custom(24 << 30, (8, 9));
        assert_eq!(c.profile().l2_cache_bytes, 52_428_800);
        assert_eq!(c.l2_cache_bytes.from.grade, Grade::Estimated);
    }

    /// Every GPU is found by its key and by its device name; keys are
    /// unique; every non-Hopper GPU says its context is estimated.
    #[test]
    fn every_gpu_by_key_and_name() {
        for g in GPUS {
            assert_eq!(gpu(g.key).unwrap().key, g.key);
            assert_eq!(gpu(g.name).unwrap().key, g.key);
            assert_eq!(GPUS.iter().filter(|o| o.key == g.key).count(), 1);
            let p = g.profile();
            assert!(p.usable_memory > 0 && p.usable_memory < p.total_memory);
            if g.capability != (9, 0) {
                assert!(p.grades.estimated().contains(&"CUDA context"), "{}", g.key);
            }
        }
        assert_eq!(gpu("A100_80GB").unwrap().key, "a100-80gb");
        assert!(gpu("a100").is_none());
    }

    /// `parseChosenWorkspaceSize`: 32 MiB on sm 9.0 only in 2.11; the
    /// `:4096:2:16:8` default on Ampere, Ada, Turing, Volta and Blackwell.
    #[test]
    fn cublas_workspace_by_capability() {
        for g in GPUS {
            let want = if g.capability == (9, 0) {
                32 << 20
            } else {
                8_519_680
            };
            assert_eq!(g.profile().cublas_workspace, want, "{}", g.key);
        }
    }

    /// sdp_utils.cpp: no flash or cuDNN before sm80; cuDNN first on
    /// Hopper and B200 only; bf16 memory-efficient from sm80.
    #[test]
    fn sdpa_backends_by_capability() {
        let s = |k: &str| gpu(k).unwrap().profile().sdpa;
        assert!(!s("t4").flash && !s("t4").cudnn && s("t4").efficient && !s("t4").bf16);
        assert!(!s("v100").flash && s("v100").efficient);
        assert!(s("a100-80gb").flash && !s("a100-80gb").prefers_cudnn);
        assert!(s("b200").prefers_cudnn && !s("b200").cudnn_hopper_head_dim);
        assert!(s("rtx4090").flash_head_dim_192_limit && !s("a100-40gb").flash_head_dim_192_limit);
    }

    #[test]
    fn custom_takes_the_given_total() {
        let p = GpuSpec::custom(24 << 30, (8, 9)).profile();
        assert_eq!(p.total_memory, 24 << 30);
        assert_eq!(p.cublas_workspace, 8_519_680);
        assert_eq!(p.grades.total_memory.source, "given with --memory");
        assert!(p.grades.estimated().contains(&"CUDA context"));
    }
}

//! `F.conv2d` as PyTorch 2.11 runs it on CUDA with cuDNN (`torch.backends.cudnn`
//! defaults: enabled, `benchmark=False`, `allow_tf32=True`), and the
//! `ConvolutionBackward0` node it records.
//!
//! Forward (`at::convolution` → `at::_convolution`, backend `ConvBackend::Cudnn`,
//! `aten/src/ATen/native/Convolution.cpp`):
//! `cudnn_convolution(input.contiguous(fmt), weight, ...)` then, with a bias,
//! `output.add_(reshape_bias(...))` in place. `cudnn_convolution_forward`
//! (`native/cudnn/ConvShared.cpp`) allocates the output with `at::empty(...,
//! layout)` (contiguous NCHW here), makes weight and input contiguous (no copy
//! when they already are) and runs `run_single_conv` (`native/cudnn/Conv_v8.cpp`):
//! the cached or heuristics-chosen execution plan is executed by
//! `run_conv_plan`, which takes `plan.getWorkspaceSize()` bytes from the caching
//! allocator and releases them when it returns — a temporary of the plan's size
//! (`allocate(0)` records nothing). The plan cache is per thread, but it holds
//! plans, not memory: every call allocates the same workspace.
//!
//! Autograd: `convolution`'s entry in `derivatives.yaml` (`input, weight, bias:
//! convolution_backward_symint(grad, input, weight, bias->sym_sizes(), ...)`)
//! makes `ConvolutionBackward0` save `input` and `weight` (as inputs: no extra
//! memory) and the bias sizes.
//!
//! Backward (`convolution_backward`, `Convolution.cpp`) with `output_mask` =
//! which inputs need a gradient: `cudnn_convolution_backward` first makes
//! `grad_output` contiguous (a copy when it is not — ViT's gradient arrives as a
//! transposed view), then `grad_input = at::empty(input sizes)` + the dgrad plan's
//! workspace if the input needs a gradient (pixel values do not), then
//! `grad_weight = at::empty(weight sizes)` + the wgrad plan's workspace; the
//! contiguous copy dies when that function returns; last, `grad_bias =
//! grad_output.sum({0, 2, 3})` on the original gradient (a reduction that may
//! take global scratch, `ops/reduce.rs`).
//!
//! The workspace sizes are what cuDNN's chosen engine asks for; they cannot be
//! derived from PyTorch's source. [`cudnn_conv_workspace`] reads them from a
//! table measured on the H100 at every batch size (`cudnn_conv_h100.txt`, see
//! `TABLE_H100`), keyed by everything the cuDNN heuristic sees; a problem that
//! was not measured gets [`UNMEASURED_WORKSPACE`] (0 bytes) — see there.
//!
//! Under a memory limit (`run_single_conv`, `Conv_v8.cpp`): a plan whose
//! workspace does not fit raises an out-of-memory that `try_configs` catches
//! (after the allocator has released its cache), and cuDNN runs the next
//! heuristic config. The twin takes the first config's workspace and reports
//! that out-of-memory instead; the sizes cuDNN tries next are measured
//! (`tried` in `fixtures/ops/conv_workspace_h100.jsonl.xz`) but not modelled.

use crate::autograd::{Backward, Pending};
use crate::dtype::{DType, Device};
use crate::error::{shape_err, EngineError, Result};
use crate::runtime::{Category, DeviceProfile, Runtime};
use crate::tensor::Tensor;

/// Which cuDNN operation graph runs (`cudnnBackendDescriptorType_t` of
/// `run_single_conv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConvOp {
    /// `CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR`
    Forward,
    /// `..._BACKWARD_DATA_DESCRIPTOR` (grad_input, "dgrad")
    BackwardData,
    /// `..._BACKWARD_FILTER_DESCRIPTOR` (grad_weight, "wgrad")
    BackwardFilter,
}

/// The hyper-parameters of a 2-D convolution (`stride`, `padding`,
/// `dilation`, `groups`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conv2dArgs {
    /// `stride` (height, width)
    pub stride: [i64; 2],
    /// `padding` (height, width), symmetric as `nn.Conv2d` passes it
    pub padding: [i64; 2],
    /// `dilation` (height, width)
    pub dilation: [i64; 2],
    /// `groups`
    pub groups: i64,
}

impl Default for Conv2dArgs {
    fn default() -> Self {
        Conv2dArgs {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

/// The measured table (`cudnn_conv_h100.txt`, made by
/// `validation/conv_workspace_table.py` from `validation/conv_workspace.sh`'s
/// runs on an H100 with PyTorch 2.11.0+cu130 and the cuDNN 9.19 it bundles;
/// the raw measurements are `fixtures/ops/conv_workspace_h100.jsonl.xz`).
///
/// Each problem is a patch embedding as ViT runs it: input (N, 3, H, W) and
/// filter (K, 3, R, S) in contiguous NCHW/KCRS layout with 16-byte-aligned
/// pointers, stride (R, S), no padding, dilation 1, one group, TF32 allowed,
/// not deterministic. The workspace is what `run_conv_plan` took for the plan
/// of the first heuristic config (memory was plentiful), measured at every
/// batch 1..=128 or 1..=256 (and 264..=512 by 8 for hidden 384). It is not a
/// formula of the problem: the engine the heuristic picks changes with the
/// batch (hidden 384, bf16, backward-filter: 13,966,352 bytes at batch 13,
/// 24,357,008 at 14), and each engine's workspace grows with the batch
/// (192,431,248 bytes at 187). The table stores the runs of batches over which
/// the bytes are affine, exactly: every measured batch and nothing between.
const TABLE_H100: &str = include_str!("cudnn_conv_h100.txt");

/// One run of the table: for batches `first, first + step, ..=last` the
/// workspace is `bytes + slope * (N - first)`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Run {
    op: ConvOp,
    dtype: DType,
    /// the filter (K, C, R, S); stride (R, S), no padding
    weight: [i64; 4],
    /// the image (H, W)
    image: [i64; 2],
    first: i64,
    last: i64,
    step: i64,
    bytes: i64,
    slope: i64,
}

impl Run {
    fn parse(line: &str) -> Option<Run> {
        let mut f = line.split_ascii_whitespace();
        let op = match f.next()? {
            "forward" => ConvOp::Forward,
            "dgrad" => ConvOp::BackwardData,
            "wgrad" => ConvOp::BackwardFilter,
            _ => return None,
        };
        let dtype = match f.next()? {
            "fp32" => DType::F32,
            "bf16" => DType::BF16,
            "fp16" => DType::F16,
            _ => return None,
        };
        let mut n = [0i64; 11];
        for x in n.iter_mut() {
            *x = f.next()?.parse().ok()?;
        }
        let [k, c, r, s, h, w, first, last, step, bytes, slope] = n;
        (f.next().is_none() && step > 0).then_some(Run {
            op,
            dtype,
            weight: [k, c, r, s],
            image: [h, w],
            first,
            last,
            step,
            bytes,
            slope,
        })
    }

    /// The same problem, at any batch size.
    fn holds(
        &self,
        op: ConvOp,
        dtype: DType,
        input: &[i64],
        weight: &[i64],
        a: &Conv2dArgs,
    ) -> bool {
        self.op == op
            && self.dtype == dtype
            && input.len() == 4
            && input[1..] == [self.weight[1], self.image[0], self.image[1]]
            && *weight == self.weight
            && a.stride == [self.weight[2], self.weight[3]]
            && a.padding == [0, 0]
            && a.dilation == [1, 1]
            && a.groups == 1
    }

    /// The workspace at batch `n`, if this run measured it.
    fn at(&self, n: i64) -> Option<u64> {
        (self.first..=self.last)
            .contains(&n)
            .then_some(n - self.first)
            .filter(|d| d % self.step == 0)
            .map(|d| (self.bytes + self.slope * d) as u64)
    }
}

/// The table's runs (parsed once; the file is part of the source, so a bad
/// line is a bug the tests catch).
fn table() -> &'static [Run] {
    static RUNS: std::sync::OnceLock<Vec<Run>> = std::sync::OnceLock::new();
    RUNS.get_or_init(|| {
        TABLE_H100
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(Run::parse)
            .collect()
    })
}

/// The runs of the table for `profile`'s GPU and torch.
fn runs_for(profile: &DeviceProfile) -> &'static [Run] {
    if profile.cudnn_tables {
        table()
    } else {
        &[]
    }
}

/// The workspace the twin assumes for a problem absent from the measured
/// table: none. cuDNN's workspace depends on the engine its heuristic picks,
/// which no formula in PyTorch predicts. It lives only inside the op, so it
/// never changes what stays allocated, but it can be large (183.5 MiB for
/// ViT's patch embedding at batch 187) and, under a memory limit, decide
/// whether the allocator releases its cache there or runs out.
/// [`cudnn_conv_workspace`] returns `None` for such problems, and the op
/// notes each one in the event log (`EventLog::unmeasured`), which the
/// estimate reports (`vramscope estimate` prints it as a warning, `--json`
/// lists it under `unmeasured`). `vramscope run` takes
/// [`cudnn_conv_nearest_workspace`]'s estimate where one exists.
pub const UNMEASURED_WORKSPACE: u64 = 0;

/// The bytes cuDNN's plan for `op` takes from the caching allocator for a
/// convolution of `input` (N, C, H, W) by `weight` (K, C/groups, R, S) in
/// `dtype` on `profile`'s GPU, if that problem was measured.
pub fn cudnn_conv_workspace(
    profile: &DeviceProfile,
    op: ConvOp,
    dtype: DType,
    input: &[i64],
    weight: &[i64],
    args: &Conv2dArgs,
) -> Option<u64> {
    runs_for(profile)
        .iter()
        .filter(|r| r.holds(op, dtype, input, weight, args))
        .find_map(|r| r.at(input[0]))
}

/// The measured table of whole problems (`cudnn_conv_problems.txt.xz`, made by
/// `validation/run/conv_table.py` from the validation scripts' per-op records
/// on an sm_90 GPU, unpacked by build.rs): every convolution those programs run,
/// any batch, layout, dimension or transposition, keyed by what `convolution` receives.
const PROBLEMS_SM90: &str = include_str!(concat!(env!("OUT_DIR"), "/cudnn_conv_problems.txt"));

/// A convolution as ATen's `convolution` / `convolution_backward` receives it
/// (sizes as called: a 1-D convolution keeps its 3-D sizes), and which of
/// cuDNN's three operation graphs runs for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvProblem<'a> {
    /// which operation graph
    pub op: ConvOp,
    /// the operands' dtype
    pub dtype: DType,
    /// `cudnn_conv_suggest_memory_format` (`ConvUtils.h`) chose channels-last
    pub channels_last: bool,
    /// a transposed convolution
    pub transposed: bool,
    /// the input's sizes
    pub input: &'a [i64],
    /// the weight's sizes
    pub weight: &'a [i64],
    /// `stride`
    pub stride: &'a [i64],
    /// `padding`
    pub padding: &'a [i64],
    /// `dilation`
    pub dilation: &'a [i64],
    /// `output_padding`
    pub output_padding: &'a [i64],
    /// `groups`
    pub groups: i64,
}

impl ConvProblem<'_> {
    /// The table's key (a line's fields before its `|`: every field of the
    /// problem, the input's sizes without the batch) and the batch; `None`
    /// for an input without sizes.
    fn key(&self) -> Option<(String, i64)> {
        let j = |v: &[i64]| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let op = match self.op {
            ConvOp::Forward => "forward",
            ConvOp::BackwardData => "dgrad",
            ConvOp::BackwardFilter => "wgrad",
        };
        let (&batch, rest) = self.input.split_first()?;
        let key = format!(
            "{op} {} {} {} {} {} {} {} {} {} {}",
            self.dtype,
            if self.channels_last { "nhwc" } else { "nchw" },
            u8::from(self.transposed),
            j(rest),
            j(self.weight),
            j(self.stride),
            j(self.padding),
            j(self.dilation),
            j(self.output_padding),
            self.groups
        );
        Some((key, batch))
    }
}

/// The problem table's lines, sorted by key as `conv_sweep.py merge` writes
/// them (found once: a lookup is a binary search, so nothing is parsed up
/// front; the file is part of the source, and the tests check that it is
/// sorted and that every line parses).
fn problem_lines() -> &'static [&'static str] {
    static LINES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    LINES.get_or_init(|| {
        PROBLEMS_SM90
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .collect()
    })
}

/// A line's key (the fields before the `|`) and its batches' bytes
/// (`BATCH:BYTES` pairs after it); `None` if a pair does not parse.
fn split_line(line: &str) -> Option<(&str, Vec<(i64, u64)>)> {
    let (key, pairs) = line.split_once(" | ")?;
    let pairs = pairs
        .split(' ')
        .map(|p| {
            let (n, bytes) = p.split_once(':')?;
            Some((n.parse().ok()?, bytes.parse().ok()?))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((key, pairs))
}

/// The measured bytes of the problem `key` (a [`ConvProblem::key`]) at
/// `batch`.
fn problem_bytes(key: &str, batch: i64) -> Option<u64> {
    let lines = problem_lines();
    let i = lines
        .binary_search_by(|l| l.split_once(" | ").map_or(*l, |(k, _)| k).cmp(key))
        .ok()?;
    let (_, pairs) = split_line(lines[i])?;
    pairs.iter().find(|(n, _)| *n == batch).map(|(_, b)| *b)
}

/// The bytes of the problem `key` at `batch` where `profile`'s GPU took its own plan.
fn gpu_problem_bytes(profile: &DeviceProfile, key: &str, batch: i64) -> Option<u64> {
    let (_, pairs) = profile
        .cudnn_own_plans
        .lines()
        .filter_map(split_line)
        .find(|(k, _)| *k == key)?;
    pairs.iter().find(|(n, _)| *n == batch).map(|(_, b)| *b)
}

/// The bytes cuDNN's plan takes for `problem` on `profile`'s GPU, if it was
/// measured: first the GPU's own plans, then the whole-problem table, then (for
/// a 2-D, NCHW, not transposed problem) the batch-swept table of
/// [`cudnn_conv_workspace`].
pub fn cudnn_conv_problem_workspace(profile: &DeviceProfile, problem: &ConvProblem) -> Option<u64> {
    if profile.cudnn_tables {
        if let Some(bytes) = problem.key().and_then(|(key, n)| {
            gpu_problem_bytes(profile, &key, n).or_else(|| problem_bytes(&key, n))
        }) {
            return Some(bytes);
        }
    }
    let two = |v: &[i64]| <[i64; 2]>::try_from(v).ok();
    if problem.transposed || problem.channels_last || problem.input.len() != 4 {
        return None;
    }
    let args = Conv2dArgs {
        stride: two(problem.stride)?,
        padding: two(problem.padding)?,
        dilation: two(problem.dilation)?,
        groups: problem.groups,
    };
    cudnn_conv_workspace(
        profile,
        problem.op,
        problem.dtype,
        problem.input,
        problem.weight,
        &args,
    )
}

/// The measured problem nearest to one the table does not hold, and the
/// estimate taken from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NearestConv {
    /// the neighbour's bytes, scaled (see [`cudnn_conv_nearest_workspace`])
    pub bytes: u64,
    /// the neighbour's input sizes, batch first
    pub input: Vec<i64>,
    /// the neighbour's weight sizes
    pub weight: Vec<i64>,
    /// the neighbour's padding
    pub padding: Vec<i64>,
    /// the neighbour's dilation
    pub dilation: Vec<i64>,
    /// how alike the neighbour is
    pub likeness: Likeness,
}

/// Which problems [`cudnn_conv_nearest_workspace`] took its neighbour from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Likeness {
    /// the problem's own kind: every field but the batch and spatial sizes
    Kind,
    /// its kernel: the kind with other channels
    Kernel,
    /// its kernel's shape: the kernel with other padding and dilation
    Shape,
}

/// One line of the problem table, parsed for the neighbour search.
struct Neighbour {
    /// input channels
    channels: i64,
    /// output channels
    out_channels: i64,
    /// the input's sizes after the channels
    spatial: Vec<i64>,
    weight: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    /// (batch, bytes) measured
    pairs: Vec<(i64, u64)>,
}

/// A table key's parts for the neighbour search.
struct KeyParts {
    /// every field but the batch and the input's spatial sizes: the kind
    kind: String,
    /// the kind without the channels: op, dtype, layout, transposition,
    /// kernel size, stride, padding, dilation, output padding, and whether
    /// the groups are none, one per input channel, or other
    kernel: String,
    /// the kernel without the padding and dilation
    shape: String,
    line: Neighbour,
}

/// The parts of a table key (a line's fields before its `|`).
fn key_parts(key: &str) -> Option<KeyParts> {
    let fields: Vec<&str> = key.split(' ').collect();
    if fields.len() != 11 {
        return None;
    }
    let ints = |f: &str| {
        f.split(',')
            .map(|x| x.parse::<i64>().ok())
            .collect::<Option<Vec<i64>>>()
    };
    let sizes = ints(fields[4])?;
    let weight = ints(fields[5])?;
    let groups: i64 = fields[10].parse().ok()?;
    let (&channels, spatial) = sizes.split_first()?;
    let out_channels = if fields[3] == "1" {
        weight.get(1)? * groups
    } else {
        *weight.first()?
    };
    let mut kind = fields.clone();
    let c = channels.to_string();
    kind[4] = &c;
    let grouping = match groups {
        1 => "dense",
        g if g == channels => "depthwise",
        _ => "grouped",
    };
    let kernel_size = weight
        .get(2..)?
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let shape = format!(
        "{} {} {} {} {} {kernel_size} {} {} {grouping}",
        fields[0],
        fields[1],
        fields[2],
        fields[3],
        spatial.len(),
        fields[6],
        fields[9],
    );
    Some(KeyParts {
        kind: kind.join(" "),
        kernel: format!("{shape} {} {}", fields[7], fields[8]),
        shape,
        line: Neighbour {
            channels,
            out_channels,
            spatial: spatial.to_vec(),
            weight,
            padding: ints(fields[7])?,
            dilation: ints(fields[8])?,
            pairs: Vec::new(),
        },
    })
}

/// The table's lines, parsed, and grouped by kind and by kernel (each group
/// holds indices into the first).
struct NeighbourIndex {
    lines: Vec<Neighbour>,
    by_kind: std::collections::HashMap<String, Vec<usize>>,
    by_kernel: std::collections::HashMap<String, Vec<usize>>,
    by_shape: std::collections::HashMap<String, Vec<usize>>,
}

fn neighbour_index() -> &'static NeighbourIndex {
    static INDEX: std::sync::OnceLock<NeighbourIndex> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        let mut index = NeighbourIndex {
            lines: Vec::new(),
            by_kind: std::collections::HashMap::new(),
            by_kernel: std::collections::HashMap::new(),
            by_shape: std::collections::HashMap::new(),
        };
        for line in problem_lines() {
            let Some((key, pairs)) = split_line(line) else {
                continue;
            };
            let Some(parts) = key_parts(key) else {
                continue;
            };
            let i = index.lines.len();
            index.by_kind.entry(parts.kind).or_default().push(i);
            index.by_kernel.entry(parts.kernel).or_default().push(i);
            index.by_shape.entry(parts.shape).or_default().push(i);
            index.lines.push(Neighbour {
                pairs,
                ..parts.line
            });
        }
        index
    })
}

/// How the nearest measured line's bytes grow with its batch: the exponent
/// `ln(b2 / b1) / ln(n2 / n1)`, clamped to 0..=1, between its batch `n`
/// (`bytes`) and the line's next measured batch towards the wanted problem
/// (the next larger where the wanted problem is larger, else the next
/// smaller; the other side where there is none). 1 (the bytes scale with the
/// problem) where the line holds one batch or either bytes is 0 but not both.
/// A line is one problem at several batches: a heuristic that keeps one
/// engine whose workspace does not depend on the batch (a split-K weight
/// gradient's partial sums, a fixed plan buffer) shows bytes that stay put,
/// one whose workspace is per image (an im2col or transposed copy of the
/// input) bytes that grow with it (docs/run.md, "Unmeasured convolutions").
fn line_growth(pairs: &[(i64, u64)], n: i64, bytes: u64, up: bool) -> f64 {
    let larger = pairs
        .iter()
        .filter(|&&(m, _)| m > n)
        .min_by_key(|&&(m, _)| m);
    let smaller = pairs
        .iter()
        .filter(|&&(m, _)| m < n)
        .max_by_key(|&&(m, _)| m);
    let partner = if up {
        larger.or(smaller)
    } else {
        smaller.or(larger)
    };
    let Some(&(m, other)) = partner else {
        return 1.0;
    };
    if bytes == other {
        return 0.0;
    }
    if bytes == 0 || other == 0 {
        return 1.0;
    }
    ((other as f64 / bytes as f64).ln() / (m.max(1) as f64 / n.max(1) as f64).ln()).clamp(0.0, 1.0)
}

/// For a problem neither table holds, an estimate from the nearest measured
/// problem: nearest by the sum of the absolute log ratios of batch and
/// spatial size (the smaller batch, then the smaller sizes, on a tie).
/// Among the problems of the same kind (operation graph, dtype, layout,
/// weight, stride, padding, dilation, output padding, groups and input
/// channels) where there are any, the bytes scaled by the ratio of batch ×
/// spatial size raised to the neighbour line's growth ([`line_growth`]: how
/// its bytes grow with its own batch, 0 to 1); else among those of the same
/// kernel (the kind with other channels), the log ratios of input and output
/// channels added to the distance and the bytes also scaled by √(input ×
/// output channels); else the same among those of its kernel's shape (the
/// kernel with other padding and dilation). The growth exponent was chosen
/// by leaving each table line out in turn (against scaling by the ratio
/// itself, capping at the largest measured bytes, the median or least of the
/// nearest three or five, 0 where most of them are 0) and checked on the
/// problems blind217-blind223 added to the table, held out. An estimate, not
/// cuDNN's choice; how close it comes is measured in docs/run.md,
/// "Unmeasured convolutions". `None` where no
/// problem of its kernel's shape was measured, or for a GPU without the
/// tables.
pub fn cudnn_conv_nearest_workspace(
    profile: &DeviceProfile,
    problem: &ConvProblem,
) -> Option<NearestConv> {
    if !profile.cudnn_tables {
        return None;
    }
    let (key, batch) = problem.key()?;
    let parts = key_parts(&key)?;
    let index = neighbour_index();
    let (likeness, group) = if let Some(group) = index.by_kind.get(&parts.kind) {
        (Likeness::Kind, group)
    } else if let Some(group) = index.by_kernel.get(&parts.kernel) {
        (Likeness::Kernel, group)
    } else {
        (Likeness::Shape, index.by_shape.get(&parts.shape)?)
    };
    let same_kind = likeness == Likeness::Kind;
    let want = &parts.line;
    let size = |v: &[i64]| v.iter().product::<i64>().max(1) as f64;
    let ln_ratio = |a: f64, b: f64| (a / b).ln().abs();
    let channels = |l: &Neighbour| {
        if same_kind {
            0.0
        } else {
            ln_ratio(l.channels.max(1) as f64, want.channels.max(1) as f64)
                + ln_ratio(
                    l.out_channels.max(1) as f64,
                    want.out_channels.max(1) as f64,
                )
        }
    };
    let mut best: Option<(f64, i64, &Neighbour, u64)> = None;
    for line in group.iter().map(|&i| &index.lines[i]) {
        let shape = ln_ratio(size(&line.spatial), size(&want.spatial)) + channels(line);
        for &(n, bytes) in &line.pairs {
            let distance = shape + ln_ratio(n.max(1) as f64, batch.max(1) as f64);
            let better = best.as_ref().is_none_or(|(d, bn, bl, _)| {
                distance < *d
                    || (distance == *d
                        && (n, &line.spatial, line.channels, line.out_channels)
                            < (*bn, &bl.spatial, bl.channels, bl.out_channels))
            });
            if better {
                best = Some((distance, n, line, bytes));
            }
        }
    }
    let (_, n, line, bytes) = best?;
    let ratio =
        (batch.max(1) as f64 * size(&want.spatial)) / (n.max(1) as f64 * size(&line.spatial));
    let channel_ratio = if same_kind {
        1.0
    } else {
        ((want.channels.max(1) * want.out_channels.max(1)) as f64
            / (line.channels.max(1) * line.out_channels.max(1)) as f64)
            .sqrt()
    };
    let growth = line_growth(&line.pairs, n, bytes, ratio * channel_ratio > 1.0);
    let scaled = if same_kind && growth == 1.0 {
        let wanted =
            u128::from(batch.max(1).unsigned_abs()) * u128::from(size(&want.spatial) as u64);
        let have = u128::from(n.max(1).unsigned_abs()) * u128::from(size(&line.spatial) as u64);
        u64::try_from((u128::from(bytes) * wanted + have / 2) / have).unwrap_or(u64::MAX)
    } else {
        (bytes as f64 * ratio.powf(growth) * channel_ratio).round() as u64
    };
    let mut input = vec![n, line.channels];
    input.extend(&line.spatial);
    Some(NearestConv {
        bytes: scaled,
        input,
        weight: line.weight.clone(),
        padding: line.padding.clone(),
        dilation: line.dilation.clone(),
        likeness,
    })
}

/// `conv_output_size`: `(in + 2 pad - dilation (k - 1) - 1) / stride + 1`.
fn out_size(input: i64, k: i64, a: &Conv2dArgs, d: usize) -> i64 {
    (input + 2 * a.padding[d] - a.dilation[d] * (k - 1) - 1) / a.stride[d] + 1
}

/// `run_conv_plan`'s workspace: allocated and released inside the op.
fn workspace(
    rt: &Runtime,
    op: ConvOp,
    dtype: DType,
    input: &[i64],
    weight: &[i64],
    args: &Conv2dArgs,
) -> Result<()> {
    // the plan is built before its workspace is known: the engines load
    rt.cudnn_plan();
    let profile = rt.st.borrow().profile.clone();
    let measured = cudnn_conv_workspace(&profile, op, dtype, input, weight, args);
    if measured.is_none() {
        rt.note_unmeasured(format!(
            "cuDNN's workspace for {} of input {input:?} by weight {weight:?} ({dtype}, stride {:?}, padding {:?}) is not measured for {}: taken as 0 bytes",
            match op {
                ConvOp::Forward => "the forward convolution",
                ConvOp::BackwardData => "the input gradient",
                ConvOp::BackwardFilter => "the weight gradient",
            },
            args.stride,
            args.padding,
            profile.name,
        ));
    }
    let bytes = measured.unwrap_or(UNMEASURED_WORKSPACE);
    // the table holds this problem at another batch size: the workspace
    // here is no rule's (a sweep must run the model at every batch)
    if runs_for(&profile)
        .iter()
        .any(|r| r.holds(op, dtype, input, weight, args))
    {
        rt.note_measured_size();
    }
    let name = match op {
        ConvOp::Forward => "cudnn_convolution",
        ConvOp::BackwardData => "cudnn_convolution_backward_input",
        ConvOp::BackwardFilter => "cudnn_convolution_backward_weight",
    };
    rt.kernels16(name)?;
    let ws = rt.storage(bytes, Device::Cuda, name, Category::Workspace)?;
    drop(ws);
    Ok(())
}

/// The checks of `check_shape_forward` / `ConvParams` the twin relies on,
/// and the backend restrictions it models.
fn check(input: &Tensor, weight: &Tensor, bias: Option<&Tensor>, a: &Conv2dArgs) -> Result<()> {
    const OP: &str = "conv2d";
    if input.dim() != 4 || weight.dim() != 4 {
        return Err(shape_err(
            OP,
            format!(
                "expected a 4-D input (N, C, H, W) and a 4-D weight, got {:?} and {:?}",
                input.sizes(),
                weight.sizes()
            ),
        ));
    }
    let pos = |v: &[i64; 2]| v.iter().all(|&x| x > 0);
    if !pos(&a.stride) || !pos(&a.dilation) || a.padding.iter().any(|&p| p < 0) || a.groups <= 0 {
        return Err(shape_err(
            OP,
            format!("invalid stride/padding/dilation/groups {a:?}"),
        ));
    }
    let (c, k) = (input.sizes()[1], weight.sizes()[0]);
    if weight.sizes()[1] * a.groups != c || k % a.groups != 0 {
        return Err(shape_err(
            OP,
            format!(
                "weight {:?} with groups={} does not fit an input of {c} channels",
                weight.sizes(),
                a.groups
            ),
        ));
    }
    if let Some(b) = bias {
        if b.sizes() != [k] {
            return Err(shape_err(
                OP,
                format!("bias {:?} for {k} output channels", b.sizes()),
            ));
        }
        if b.dtype() != input.dtype() {
            return Err(EngineError::Mismatch {
                op: OP,
                detail: format!(
                    "Input type ({}) and bias type ({}) should be the same",
                    input.dtype(),
                    b.dtype()
                ),
            });
        }
    }
    if input.dtype() != weight.dtype() {
        return Err(EngineError::Mismatch {
            op: OP,
            detail: format!(
                "Input type ({}) and weight type ({}) should be the same",
                input.dtype(),
                weight.dtype()
            ),
        });
    }
    if input.device() != weight.device() {
        return Err(EngineError::Mismatch {
            op: OP,
            detail: format!(
                "input on {} and weight on {}",
                input.device(),
                weight.device()
            ),
        });
    }
    if !input.dtype().is_floating() {
        return Err(EngineError::Unsupported {
            what: format!("conv2d of {} tensors", input.dtype()),
        });
    }
    for d in 0..2 {
        let eff = a.dilation[d] * (weight.sizes()[2 + d] - 1) + 1;
        if input.sizes()[2 + d] + 2 * a.padding[d] < eff {
            return Err(shape_err(
                OP,
                format!(
                    "kernel {:?} (dilated) is larger than the padded input {:?}",
                    &weight.sizes()[2..],
                    &input.sizes()[2..]
                ),
            ));
        }
    }
    // ConvParams::is_depthwise: PyTorch picks between cuDNN and its own
    // depthwise kernels (`use_cudnn_depthwise`), not modelled
    if a.groups > 1 && a.groups == c && k % c == 0 {
        return Err(EngineError::Unsupported {
            what: "depthwise conv2d (groups == in_channels)".into(),
        });
    }
    // cudnn_conv_suggest_memory_format: a channels-last input or weight runs NHWC
    let nhwc = |t: &Tensor| {
        let (s, st) = (t.sizes(), t.strides());
        !t.is_contiguous()
            && st[1] == 1
            && st[3] == s[1]
            && st[2] == s[3] * s[1]
            && st[0] == s[2] * s[3] * s[1]
    };
    if nhwc(input) || nhwc(weight) {
        return Err(EngineError::Unsupported {
            what: "channels_last conv2d".into(),
        });
    }
    // tensors beyond 32-bit indexing take other paths (batch splitting)
    let big = i32::MAX as i64;
    if input.numel() > big || weight.numel() > big {
        return Err(EngineError::Unsupported {
            what: "conv2d on tensors of more than 2^31 elements".into(),
        });
    }
    Ok(())
}

/// A contiguous copy made below autograd (`t.contiguous()` inside a kernel),
/// or `None` when `t` already is.
fn contiguous_copy(t: &Tensor, op: &'static str) -> Result<Option<Tensor>> {
    if t.is_contiguous() {
        return Ok(None);
    }
    t.rt()
        .empty_op(t.sizes(), t.dtype(), t.device(), op, Category::Temporary)
        .map(Some)
}

impl Tensor {
    /// `F.conv2d(input, weight, bias, stride, padding, dilation, groups)` on
    /// CUDA through cuDNN: the output, the plan's workspace, and a
    /// `ConvolutionBackward0` saving `input` and `weight`.
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        stride: [i64; 2],
        padding: [i64; 2],
        dilation: [i64; 2],
        groups: i64,
    ) -> Result<Tensor> {
        // autocast_mode.cpp: conv2d is a lower_precision_fp op
        crate::autocast!(self.rt(), "conv2d", [self, weight, bias] => |a| a.t(0).conv2d(a.t(1), a.opt(2), stride, padding, dilation, groups));
        let args = Conv2dArgs {
            stride,
            padding,
            dilation,
            groups,
        };
        check(self, weight, bias, &args)?;
        let rt = self.rt().clone();
        let mut pending = Pending::begin(&rt, &[Some(self), Some(weight), bias]);
        // ConvolutionBackward0: input_, weight_ (bias_sym_sizes_opt is sizes)
        let slots = pending.as_mut().map(|p| (p.save(self), p.save(weight)));
        let (n, k) = (self.sizes()[0], weight.sizes()[0]);
        let ho = out_size(self.sizes()[2], weight.sizes()[2], &args, 0);
        let wo = out_size(self.sizes()[3], weight.sizes()[3], &args, 1);
        // _convolution: input.contiguous(backend_memory_format)
        let input_c = contiguous_copy(self, "contiguous")?;
        // cudnn_convolution_forward: at::empty(conv_output_size, input options, layout)
        let out = rt.empty_op(
            &[n, k, ho, wo],
            self.dtype(),
            self.device(),
            "cudnn_convolution",
            Category::Output,
        )?;
        if out.numel() > 0 && self.device() == Device::Cuda {
            // weight->contiguous(layout): parameters are contiguous
            let weight_c = contiguous_copy(weight, "contiguous")?;
            workspace(
                &rt,
                ConvOp::Forward,
                self.dtype(),
                self.sizes(),
                weight.sizes(),
                &args,
            )?;
            drop(weight_c);
        }
        drop(input_c);
        // output.add_(reshape_bias(input.dim(), bias)): in place, a view of the bias
        if let (Some(p), Some((input_slot, weight_slot))) = (pending, slots) {
            p.finish(
                Backward::Convolution {
                    input: input_slot,
                    weight: weight_slot,
                    args,
                },
                &[&out],
            );
        }
        Ok(out)
    }
}

/// `convolution_backward(grad, input, weight, bias_sizes, ..., output_mask)`
/// for the cuDNN backend: `[grad_input, grad_weight, grad_bias]`, each only
/// when `mask` asks for it.
pub(crate) fn convolution_backward(
    grad: &Tensor,
    input: &Tensor,
    weight: &Tensor,
    args: &Conv2dArgs,
    mask: [bool; 3],
) -> Result<[Option<Tensor>; 3]> {
    let rt = grad.rt().clone();
    let mut out: [Option<Tensor>; 3] = [None, None, None];
    // cudnn_convolution_backward(output_mask[1] ? input.contiguous() : input, grad_output, ...)
    let input_c = if mask[1] {
        contiguous_copy(input, "contiguous")?
    } else {
        None
    };
    {
        // grad_output_t.contiguous(input.suggest_memory_format())
        let grad_c = contiguous_copy(grad, "contiguous")?;
        if input.numel() == 0 {
            if mask[0] {
                out[0] = Some(rt.empty_op(
                    input.sizes(),
                    input.dtype(),
                    input.device(),
                    "empty_like",
                    Category::Output,
                )?);
            }
            if mask[1] {
                out[1] = Some(rt.empty_op(
                    weight.sizes(),
                    weight.dtype(),
                    weight.device(),
                    "zeros_like",
                    Category::Output,
                )?);
            }
        } else {
            if mask[0] {
                let gi = rt.empty_op(
                    input.sizes(),
                    grad.dtype(),
                    grad.device(),
                    "cudnn_convolution_backward_input",
                    Category::Output,
                )?;
                let weight_c = contiguous_copy(weight, "contiguous")?;
                if gi.numel() > 0 && grad.device() == Device::Cuda {
                    workspace(
                        &rt,
                        ConvOp::BackwardData,
                        input.dtype(),
                        input.sizes(),
                        weight.sizes(),
                        args,
                    )?;
                }
                drop(weight_c);
                out[0] = Some(gi);
            }
            if mask[1] {
                let gw = rt.empty_op(
                    weight.sizes(),
                    grad.dtype(),
                    grad.device(),
                    "cudnn_convolution_backward_weight",
                    Category::Output,
                )?;
                if gw.numel() > 0 && grad.device() == Device::Cuda {
                    workspace(
                        &rt,
                        ConvOp::BackwardFilter,
                        input.dtype(),
                        input.sizes(),
                        weight.sizes(),
                        args,
                    )?;
                }
                out[1] = Some(gw);
            }
        }
        drop(grad_c);
    }
    drop(input_c);
    if mask[2] {
        // backend_grad_bias = grad_output.sum({0, 2, 3}) (the original gradient)
        out[2] = Some(grad.sum_dims(&[0, 2, 3], false)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::reduce::reduce_scratch;

    #[test]
    fn every_line_of_the_problem_table_parses_in_key_order() {
        let lines = problem_lines();
        assert!(lines.len() > 4000, "{} lines", lines.len());
        let parsed: Vec<(&str, Vec<(i64, u64)>)> = lines
            .iter()
            .map(|l| split_line(l).unwrap_or_else(|| panic!("bad line {l:?}")))
            .collect();
        assert!(parsed[0].0.split(' ').count() == 11, "{}", parsed[0].0);
        for w in parsed.windows(2) {
            assert!(
                w[0].0 < w[1].0,
                "not sorted or twice: {:?} then {:?}",
                w[0].0,
                w[1].0
            );
        }
        for (key, pairs) in &parsed {
            assert!(!pairs.is_empty(), "{key}");
            // stride, padding, dilation, output_padding: one value for each spatial dimension, as
            // the look-up expands them (`expand_param_if_needed`; `conv_sweep.py normalize`)
            let f: Vec<&str> = key.split(' ').collect();
            let dims = f[5].split(',').count() - 2;
            assert!(
                f[6..10].iter().all(|p| p.split(',').count() == dims),
                "{key}"
            );
            assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0), "{key}");
        }
        // the binary search finds each line's own bytes at each of its batches, and nothing for a
        // key or a batch not there
        for (key, pairs) in parsed.iter().step_by(97).chain(parsed.last()) {
            for &(n, bytes) in pairs {
                assert_eq!(problem_bytes(key, n), Some(bytes), "{key} at {n}");
            }
            // batch 0 is a measured batch of some lines (convolutions over an empty batch)
            let absent = (0..).find(|b| pairs.iter().all(|p| p.0 != *b)).unwrap();
            assert_eq!(problem_bytes(key, absent), None);
            assert_eq!(problem_bytes(&format!("{key} x"), pairs[0].0), None);
        }
        assert_eq!(problem_bytes("", 1), None);
        assert!(split_line("forward x | 8:1 16").is_none());
    }

    /// The problem table (measured on an H200) and the batch-swept table
    /// (measured on an H100) agree on every problem both hold.
    #[test]
    fn the_two_tables_agree_where_both_measured() {
        let h100 = DeviceProfile::h100_torch_2_11();
        let mut both = 0;
        let entries = problem_lines().iter().flat_map(|l| {
            let (key, pairs) = split_line(l).unwrap();
            pairs.into_iter().map(move |(n, bytes)| (key, n, bytes))
        });
        for (key, n, bytes) in entries {
            let f: Vec<&str> = key.split(' ').collect();
            let v =
                |i: usize| -> Vec<i64> { f[i].split(',').map(|x| x.parse().unwrap()).collect() };
            if f[2] != "nchw" || f[3] != "0" || v(4).len() != 3 {
                continue;
            }
            let (input, weight) = ([&[n][..], &v(4)].concat(), v(5));
            // a one-element list stands for both sides (`expand_param_if_needed`, Convolution.cpp)
            let pair = |i: usize| -> [i64; 2] {
                let x = v(i);
                if x.len() == 1 {
                    [x[0], x[0]]
                } else {
                    x.try_into().unwrap()
                }
            };
            let args = Conv2dArgs {
                stride: pair(6),
                padding: pair(7),
                dilation: pair(8),
                groups: f[10].parse().unwrap(),
            };
            let op = match f[0] {
                "forward" => ConvOp::Forward,
                "dgrad" => ConvOp::BackwardData,
                _ => ConvOp::BackwardFilter,
            };
            let dtype = match f[1] {
                "float32" => DType::F32,
                "bfloat16" => DType::BF16,
                _ => DType::F16,
            };
            if let Some(swept) = cudnn_conv_workspace(&h100, op, dtype, &input, &weight, &args) {
                assert_eq!(swept, bytes, "{key} at batch {n}");
                both += 1;
            }
        }
        assert!(both >= 3, "{both} problems in both tables");
    }

    /// A float32 Conv1d forward of 128 to 128 channels, kernel 3, on `input`.
    fn forward_1d(input: &[i64]) -> ConvProblem<'_> {
        ConvProblem {
            op: ConvOp::Forward,
            dtype: DType::F32,
            channels_last: false,
            transposed: false,
            input,
            weight: &[128, 128, 3],
            stride: &[1],
            padding: &[0],
            dilation: &[1],
            output_padding: &[0],
            groups: 1,
        }
    }

    /// The one problem measured where the H100's plan is not the H200's (fixtures/run/README.md,
    /// session 67): each GPU takes its own bytes, every other batch the table's.
    #[test]
    fn the_h100_takes_its_own_plan_where_the_h200s_differs() {
        let (h100, h200) = (
            DeviceProfile::h100_torch_2_11(),
            DeviceProfile::h200_torch_2_11(),
        );
        let mut p = ConvProblem {
            op: ConvOp::Forward,
            dtype: DType::BF16,
            channels_last: false,
            transposed: false,
            input: &[64, 384, 16, 16],
            weight: &[192, 384, 3, 3],
            stride: &[1, 1],
            padding: &[1, 1],
            dilation: &[1, 1],
            output_padding: &[0, 0],
            groups: 1,
        };
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), Some(20_201_619));
        assert_eq!(cudnn_conv_problem_workspace(&h200, &p), Some(22_298_867));
        p.input = &[128, 384, 16, 16];
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), Some(39_075_987));
        assert_eq!(cudnn_conv_problem_workspace(&h200, &p), Some(43_270_451));
        p.input = &[200, 384, 16, 16];
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), Some(60_309_651));
        assert_eq!(cudnn_conv_problem_workspace(&h200, &p), Some(60_309_651));
        let key = p.key().unwrap().0;
        assert!(h100
            .cudnn_own_plans
            .lines()
            .all(|l| split_line(l).is_some()));
        assert!(h100.cudnn_own_plans.starts_with(&format!("{key} | ")));
    }

    /// DCGAN's 4th discriminator convolution at batch 128 (bfloat16, channels-last) and the
    /// transposed dgrad that runs the same graph: no workspace on the H100 (blind297/kl02's H100
    /// memory history, session 68), the H200's 524,479 bytes in the table; other batches agree.
    #[test]
    fn the_h100_takes_no_workspace_for_dcgans_fourth_convolution_at_128() {
        let (h100, h200) = (
            DeviceProfile::h100_torch_2_11(),
            DeviceProfile::h200_torch_2_11(),
        );
        let mut p = ConvProblem {
            op: ConvOp::Forward,
            dtype: DType::BF16,
            channels_last: true,
            transposed: false,
            input: &[128, 256, 8, 8],
            weight: &[512, 256, 4, 4],
            stride: &[2, 2],
            padding: &[1, 1],
            dilation: &[1, 1],
            output_padding: &[0, 0],
            groups: 1,
        };
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), Some(0));
        assert_eq!(cudnn_conv_problem_workspace(&h200, &p), Some(524_479));
        (p.op, p.transposed, p.input) = (ConvOp::BackwardData, true, &[128, 512, 4, 4]);
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), Some(0));
        assert_eq!(cudnn_conv_problem_workspace(&h200, &p), Some(524_479));
        p.input = &[96, 512, 4, 4];
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), Some(0));
        assert_eq!(cudnn_conv_problem_workspace(&h200, &p), Some(0));
    }

    /// blind308/kw01's FPN and head towers at 16 x 16 (float16, channels-last, batch 16): the H100's
    /// memory history (session 69) holds no dgrad workspace in any of their 36 backward calls, the
    /// table's 4,194,719 bytes are the H200's; the H200 keeps them.
    #[test]
    fn the_h100_takes_no_workspace_for_kw01s_16x16_tower_dgrad_at_16() {
        let (h100, h200) = (
            DeviceProfile::h100_torch_2_11(),
            DeviceProfile::h200_torch_2_11(),
        );
        let p = ConvProblem {
            op: ConvOp::BackwardData,
            dtype: DType::F16,
            channels_last: true,
            transposed: false,
            input: &[16, 128, 16, 16],
            weight: &[128, 128, 3, 3],
            stride: &[1, 1],
            padding: &[1, 1],
            dilation: &[1, 1],
            output_padding: &[0, 0],
            groups: 1,
        };
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), Some(0));
        assert_eq!(cudnn_conv_problem_workspace(&h200, &p), Some(4_194_719));
    }

    /// InfoGAN's Q-head 1x1 wgrads run NCHW (their input and gradient both suggest it): the bytes
    /// blind297/kl02's H100 memory history took at their place (session 68).
    #[test]
    fn kl02s_nchw_1x1_wgrads_hold_the_h100_historys_bytes() {
        let h100 = DeviceProfile::h100_torch_2_11();
        let mut p = ConvProblem {
            op: ConvOp::BackwardFilter,
            dtype: DType::BF16,
            channels_last: false,
            transposed: false,
            input: &[128, 128, 1, 1],
            weight: &[10, 128, 1, 1],
            stride: &[1, 1],
            padding: &[0, 0],
            dilation: &[1, 1],
            output_padding: &[0, 0],
            groups: 1,
        };
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), Some(8_208));
        p.weight = &[2, 128, 1, 1];
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), Some(4_112));
    }

    #[test]
    fn a_problem_is_looked_up_by_everything_convolution_receives() {
        let h100 = DeviceProfile::h100_torch_2_11();
        let mut p = forward_1d(&[128, 128, 249]);
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), Some(16_515_088));
        p.channels_last = true;
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), None);
        p.channels_last = false;
        p.input = &[127, 128, 249];
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), None);
    }

    #[test]
    fn an_unmeasured_problem_takes_its_nearest_measured_neighbour_scaled() {
        let h100 = DeviceProfile::h100_torch_2_11();
        // the table's `forward float32 nchw 0 128,249 128,128,3 ...` holds batch 128 only,
        // `... 128,995 ...` batches 1 to 256 (16: 16,482,451 bytes)
        let mut p = forward_1d(&[127, 128, 249]);
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), None);
        let near = cudnn_conv_nearest_workspace(&h100, &p).unwrap();
        // 16,515,088 × 127 / 128, rounded
        assert_eq!((near.bytes, near.input), (16_386_064, vec![128, 128, 249]));
        // the nearest in batch and length together: 995 at batch 16, not 249 at batch 128 nor
        // blind102's 502 at batch 24; scaled by (700 / 995)^g, g = ln(12,410,896 / 16,482,451)
        // / ln(12 / 16) = 0.986, its line's growth towards the smaller problem (batch 12)
        p.input = &[16, 128, 700];
        let near = cudnn_conv_nearest_workspace(&h100, &p).unwrap();
        assert_eq!((near.bytes, near.input), (11_651_971, vec![16, 128, 995]));
        // a measured problem is its own nearest
        p.input = &[8, 128, 995];
        assert_eq!(
            cudnn_conv_nearest_workspace(&h100, &p).unwrap().bytes,
            8_339_472
        );
        // no measured problem with these input channels: the nearest of the same kernel
        p.weight = &[128, 127, 3];
        p.input = &[8, 127, 995];
        // (128 input channels at batch 8: 8,339,472 × √(127 × 128 / (128 × 128)), rounded)
        let near = cudnn_conv_nearest_workspace(&h100, &p).unwrap();
        assert_eq!(near.likeness, Likeness::Kernel);
        assert_eq!(
            (near.bytes, near.input, near.weight),
            (8_306_832, vec![8, 128, 995], vec![128, 128, 3])
        );
        // no measured problem of this dilation: the nearest of the same kernel size and stride
        p.weight = &[128, 128, 3];
        p.input = &[8, 128, 990];
        p.dilation = &[7];
        // (8,339,472 × (990 / 995)^g, g = ln(4,268,048 / 8,339,472) / ln(4 / 8) = 0.966)
        let near = cudnn_conv_nearest_workspace(&h100, &p).unwrap();
        assert_eq!(near.likeness, Likeness::Shape);
        assert_eq!(
            (near.bytes, near.input, near.dilation),
            (8_298_971, vec![8, 128, 995], vec![1])
        );
        // no measured problem with this kernel size
        p.dilation = &[1];
        p.weight = &[128, 128, 7777];
        assert_eq!(cudnn_conv_nearest_workspace(&h100, &p), None);
        // a GPU without the tables
        p.weight = &[128, 128, 3];
        let a100 = crate::gpus::gpu("a100-80gb").unwrap().profile();
        assert_eq!(cudnn_conv_nearest_workspace(&a100, &p), None);
    }

    #[test]
    fn an_estimate_grows_as_its_neighbours_line_grows() {
        let h100 = DeviceProfile::h100_torch_2_11();
        // `forward float16 nchw 0 48,28,28 24,48,1,1 ...`: 8:272 12:272 16:272; batch 10 is
        // not measured, its nearest is batch 12, and the line does not grow from 8 to 12: 272
        // bytes, not 272 × 10 / 12
        let p = ConvProblem {
            op: ConvOp::Forward,
            dtype: DType::F16,
            channels_last: false,
            transposed: false,
            input: &[10, 48, 28, 28],
            weight: &[24, 48, 1, 1],
            stride: &[1, 1],
            padding: &[0, 0],
            dilation: &[1, 1],
            output_padding: &[0, 0],
            groups: 1,
        };
        assert_eq!(cudnn_conv_problem_workspace(&h100, &p), None);
        let near = cudnn_conv_nearest_workspace(&h100, &p).unwrap();
        assert_eq!((near.bytes, near.input), (272, vec![12, 48, 28, 28]));
        // towards the smaller batch (the next smaller measured) or the larger (the next larger)
        assert_eq!(
            line_growth(&[(8, 10), (16, 20), (32, 20)], 16, 20, false),
            1.0
        );
        assert_eq!(
            line_growth(&[(8, 10), (16, 20), (32, 20)], 16, 20, true),
            0.0
        );
        // no larger batch measured: the smaller; half the growth
        assert!((line_growth(&[(4, 10), (16, 20)], 16, 20, true) - 0.5).abs() < 1e-12);
        // one batch measured, or the other's bytes 0: scaled as the problem
        assert_eq!(line_growth(&[(16, 20)], 16, 20, true), 1.0);
        assert_eq!(line_growth(&[(8, 0), (16, 20)], 16, 20, false), 1.0);
        // faster than the batch, or shrinking, clamped to 0..=1
        assert_eq!(line_growth(&[(8, 1), (16, 20)], 16, 20, false), 1.0);
        assert_eq!(line_growth(&[(8, 40), (16, 20)], 16, 20, false), 0.0);
    }

    fn vit_setup(rt: &Runtime, dtype: DType, batch: i64) -> (Tensor, Tensor, Tensor) {
        let x = rt
            .randn(&[batch, 3, 224, 224], dtype, Device::Cuda)
            .unwrap();
        let w = rt.randn(&[384, 3, 16, 16], dtype, Device::Cuda).unwrap();
        w.requires_grad_(true).unwrap();
        let b = rt.randn(&[384], dtype, Device::Cuda).unwrap();
        b.requires_grad_(true).unwrap();
        (x, w, b)
    }

    #[test]
    fn forward_allocates_the_contiguous_output_only() {
        let rt = Runtime::default();
        let (x, w, b) = vit_setup(&rt, DType::F32, 16);
        let before = rt.memory_allocated();
        rt.reset_peak_memory_stats();
        let y = x.conv2d(&w, Some(&b), [16, 16], [0, 0], [1, 1], 1).unwrap();
        assert_eq!(y.sizes(), [16, 384, 14, 14]);
        assert!(y.is_contiguous());
        // 16*384*14*14*4, as vit_train_fp32's trace shows; no forward workspace
        assert_eq!(rt.memory_allocated() - before, 4_816_896);
        assert_eq!(rt.max_memory_allocated() - before, 4_816_896);
        let n = y.grad_fn().unwrap();
        assert_eq!(n.name(), "ConvolutionBackward0");
        assert_eq!(n.num_saved(), 2);
        assert!(n.saved(0).unwrap().same(&x) && n.saved(1).unwrap().same(&w));
    }

    #[test]
    fn no_grad_forward_records_nothing() {
        let rt = Runtime::default();
        let (x, w, b) = vit_setup(&rt, DType::F32, 32);
        let y = rt
            .no_grad(|| x.conv2d(&w, Some(&b), [16, 16], [0, 0], [1, 1], 1))
            .unwrap();
        assert!(y.grad_fn().is_none());
        assert_eq!(y.nbytes(), 9_633_792);
    }

    /// The backward of ViT's patch embedding as the GPU ran it: grad_output
    /// copy, grad_weight, the wgrad workspace, the copy's release, then
    /// grad_bias with the reduction's scratch.
    fn backward_trace(dtype: DType, ws: u64, copy: u64, gw: u64, gb: u64) {
        let rt = Runtime::default();
        let (x, w, b) = vit_setup(&rt, dtype, 16);
        let y = x.conv2d(&w, Some(&b), [16, 16], [0, 0], [1, 1], 1).unwrap();
        // the gradient arrives as ViT's: flatten(2).transpose(1, 2) of the output
        let t = y.reshape(&[16, 384, 196]).unwrap().transpose(1, 2);
        let s = t.sum().unwrap();
        drop((y, t));
        rt.record_memory_history(true);
        s.backward().unwrap();
        let sizes: Vec<(bool, u64)> = rt
            .trace()
            .iter()
            .filter_map(|e| match e.action {
                vramscope_alloc::TraceAction::Alloc => Some((true, e.size)),
                vramscope_alloc::TraceAction::FreeCompleted => Some((false, e.size)),
                _ => None,
            })
            .collect();
        let start = sizes
            .iter()
            .position(|&(a, sz)| a && sz == copy)
            .expect("the grad_output copy");
        assert_eq!(
            &sizes[start..start + 6],
            &[
                (true, copy),
                (true, gw),
                (true, ws),
                (false, ws),
                (false, copy),
                (true, gb)
            ],
            "{sizes:?}"
        );
        assert!(w.grad().is_some() && b.grad().is_some());
        assert!(x.grad().is_none());
    }

    #[test]
    fn backward_allocations_match_vit_train_fp32() {
        backward_trace(DType::F32, 19_234_960, 4_816_896, 1_179_648, 1536);
    }

    #[test]
    fn backward_allocations_match_vit_train_bf16() {
        backward_trace(DType::BF16, 26_263_696, 2_408_448, 589_824, 768);
    }

    #[test]
    fn bias_grad_reduction_scratch_matches_the_trace() {
        // grad_output as ViT's backward hands it to ConvolutionBackward0:
        // (16, 384, 14, 14) viewed from a (16, 197, 384) gradient
        let rt = Runtime::default();
        let g = rt.empty(&[16, 197, 384], DType::F32, Device::Cuda).unwrap();
        let g = g
            .narrow(1, 1, 196)
            .transpose(1, 2)
            .reshape(&[16, 384, 14, 14])
            .unwrap();
        assert_eq!(g.strides(), [75_648, 1, 5376, 384]);
        let sc = reduce_scratch(&rt, &g, &[true, false, true, true], DType::F32);
        // vit_train_fp32 trace: 9,633,792-byte buffer, 12 bytes of semaphores
        assert_eq!(sc.len(), 1);
        assert_eq!((sc[0].buffer, sc[0].semaphores), (9_633_792, 12));
    }

    #[test]
    fn input_gradient_only_when_needed_and_unmeasured_workspace_is_zero() {
        let rt = Runtime::default();
        let x = rt.randn(&[2, 8, 10, 10], DType::F32, Device::Cuda).unwrap();
        x.requires_grad_(true).unwrap();
        let w = rt.randn(&[4, 8, 3, 3], DType::F32, Device::Cuda).unwrap();
        let y = x.conv2d(&w, None, [1, 1], [1, 1], [1, 1], 1).unwrap();
        assert_eq!(y.sizes(), [2, 4, 10, 10]);
        assert_eq!(
            cudnn_conv_workspace(
                &rt.profile(),
                ConvOp::BackwardData,
                DType::F32,
                x.sizes(),
                w.sizes(),
                &Conv2dArgs {
                    padding: [1, 1],
                    ..Conv2dArgs::default()
                }
            ),
            None
        );
        let s = y.sum().unwrap();
        let base = rt.memory_allocated();
        s.backward().unwrap();
        // only x.grad (6400 B, rounded to 6656) stays; the weight needs no gradient
        assert!(x.grad().is_some() && w.grad().is_none());
        assert_eq!(rt.memory_allocated() - base, 6656);
    }

    /// One line of a `conv_workspace.sh` fixture: the problem and its
    /// measured (batch, workspace bytes).
    struct Measured {
        line: String,
        op: ConvOp,
        dtype: DType,
        weight: Vec<i64>,
        image: Vec<i64>,
        args: Conv2dArgs,
        workspace: Vec<(i64, u64)>,
    }

    impl Measured {
        fn input(&self, b: i64) -> [i64; 4] {
            [b, 3, self.image[0], self.image[1]]
        }
    }

    /// The lines of the fixture at `path` (from the repository's root).
    fn measured(path: &str) -> Vec<Measured> {
        let text = vramscope_testkit::xz::fixture_text(path);
        let int = |x: &serde_json::Value| x.as_i64().unwrap();
        text.lines()
            .map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                let s = int(&v["stride"]);
                Measured {
                    line: line.chars().take(80).collect(),
                    op: match v["op"].as_str().unwrap() {
                        "forward" => ConvOp::Forward,
                        "dgrad" => ConvOp::BackwardData,
                        _ => ConvOp::BackwardFilter,
                    },
                    dtype: match v["dtype"].as_str().unwrap() {
                        "fp32" => DType::F32,
                        "bf16" => DType::BF16,
                        _ => DType::F16,
                    },
                    weight: v["weight"].as_array().unwrap().iter().map(int).collect(),
                    image: v["image"].as_array().unwrap().iter().map(int).collect(),
                    args: Conv2dArgs {
                        stride: [s, s],
                        ..Conv2dArgs::default()
                    },
                    workspace: v["workspace"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|p| (int(&p[0]), int(&p[1]) as u64))
                        .collect(),
                }
            })
            .collect()
    }

    /// Every batch `validation/conv_workspace.sh` measured on the H100
    /// (`fixtures/ops/conv_workspace_h100.jsonl.xz`: 37 convolutions in three
    /// dtypes, each forward, backward-data and backward-filter) comes out of
    /// the table exactly, and nothing in between is claimed.
    #[test]
    fn the_table_reproduces_every_measured_workspace() {
        let h100 = DeviceProfile::h100_torch_2_11();
        let mut n = 0;
        for m in measured("fixtures/ops/conv_workspace_h100.jsonl.xz") {
            let at = |b: i64| {
                cudnn_conv_workspace(&h100, m.op, m.dtype, &m.input(b), &m.weight, &m.args)
            };
            let mut seen = std::collections::BTreeSet::new();
            for &(b, bytes) in &m.workspace {
                assert_eq!(at(b), Some(bytes), "{} batch {b}", m.line);
                seen.insert(b);
                n += 1;
            }
            let last = *seen.last().unwrap();
            for b in (1..=last + 8).filter(|b| !seen.contains(b)) {
                assert_eq!(at(b), None, "{} batch {b}", m.line);
            }
        }
        assert_eq!(n, 105_279);
        let rows = TABLE_H100.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(table().len(), rows, "a line of the table does not parse");
        // another GPU: nothing measured
        let other = crate::gpus::gpu("a100-80gb").unwrap().profile();
        let w = [384, 3, 16, 16];
        let patch = Conv2dArgs {
            stride: [16, 16],
            ..Conv2dArgs::default()
        };
        let x = [187, 3, 224, 224];
        assert_eq!(
            cudnn_conv_workspace(&h100, ConvOp::BackwardFilter, DType::BF16, &x, &w, &patch),
            Some(192_431_248)
        );
        assert_eq!(
            cudnn_conv_workspace(&other, ConvOp::BackwardFilter, DType::BF16, &x, &w, &patch),
            None
        );
    }

    /// The same script run on an H200 (`CONV_SOLO=0`,
    /// `fixtures/h200/conv_workspace_h200.jsonl.xz`: every problem but the
    /// H100's large-batch ones) measured the H100's workspace at every batch,
    /// which the table, keyed by capability and torch, gives the H200 too.
    #[test]
    fn the_h200_takes_the_h100s_workspaces() {
        let h200 = DeviceProfile::h200_torch_2_11();
        let mut n = 0;
        for m in measured("fixtures/h200/conv_workspace_h200.jsonl.xz") {
            for &(b, bytes) in &m.workspace {
                let got =
                    cudnn_conv_workspace(&h200, m.op, m.dtype, &m.input(b), &m.weight, &m.args);
                assert_eq!(got, Some(bytes), "{} batch {b}", m.line);
                n += 1;
            }
        }
        assert_eq!(n, 45216);
    }

    #[test]
    fn bad_input_is_an_error() {
        let rt = Runtime::default();
        let x = rt.randn(&[2, 3, 8, 8], DType::F32, Device::Cuda).unwrap();
        let w = rt.randn(&[4, 5, 3, 3], DType::F32, Device::Cuda).unwrap();
        assert!(matches!(
            x.conv2d(&w, None, [1, 1], [0, 0], [1, 1], 1),
            Err(EngineError::Shape { .. })
        ));
        let w = rt.randn(&[4, 3, 3, 3], DType::BF16, Device::Cuda).unwrap();
        assert!(matches!(
            x.conv2d(&w, None, [1, 1], [0, 0], [1, 1], 1),
            Err(EngineError::Mismatch { .. })
        ));
        let w = rt.randn(&[4, 3, 9, 9], DType::F32, Device::Cuda).unwrap();
        assert!(x.conv2d(&w, None, [1, 1], [0, 0], [1, 1], 1).is_err());
        let w = rt.randn(&[4, 3, 3, 3], DType::F32, Device::Cuda).unwrap();
        assert!(x.conv2d(&w, None, [0, 1], [0, 0], [1, 1], 1).is_err());
        let dw = rt.randn(&[3, 1, 3, 3], DType::F32, Device::Cuda).unwrap();
        assert!(matches!(
            x.conv2d(&dw, None, [1, 1], [0, 0], [1, 1], 3),
            Err(EngineError::Unsupported { .. })
        ));
    }
}

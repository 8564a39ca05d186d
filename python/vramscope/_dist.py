"""`vramscope run --nproc N`: a torchrun-style script as one rank of N, on one simulated GPU.

The environment is torchrun's (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT), and
`torch.distributed.init_process_group` makes PyTorch's fake process group (`FakeProcessGroup`,
`torch.testing._internal.distributed.fake_pg`): every collective completes at once and moves no data,
so each rank's tensors are allocated as the real program allocates them, on the streams it uses.
"""

from __future__ import annotations

import functools
import os
import sys

import torch


def setup(cap, world: int, rank: int) -> None:
    """Set torchrun's environment and route `init_process_group` to the fake backend."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        GROUP_RANK="0",
        MASTER_ADDR=os.environ.get("MASTER_ADDR", "127.0.0.1"),
        MASTER_PORT=os.environ.get("MASTER_PORT", "29500"),
    )
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    original = dist.init_process_group

    def init_process_group(backend=None, init_method=None, *args, **kwargs):
        patch_backend(backend, kwargs.get("device_id"))
        kwargs.pop("store", None)
        kwargs.pop("device_id", None)
        kwargs["rank"], kwargs["world_size"] = rank, world
        return original("fake", *args, store=FakeStore(), **kwargs)

    _route_init(init_process_group)
    patch_ddp(world, cap)
    patch_fsdp()
    patch_dtensor()
    patch_works()
    patch_object_collectives()
    patch_dcp_plan_check()
    patch_spawn(rank)
    cap.world = (world, rank)


def _twin_warning(key: str, message: str) -> None:
    """A choice of the twin's, told once on stderr as the capture's own warnings are
    (`Capture.warn_once`), not through `warnings`: under the program's "error" filter it would
    raise inside the program, where the GPU's run has no warning."""
    from . import _capture

    cap = _capture.current()
    if cap is not None:
        cap.warn_once(key, message)
    else:
        print(f"vramscope: warning: {message}", file=sys.stderr)


def patch_spawn(rank: int) -> None:
    """`torch.multiprocessing.spawn(fn, args, nprocs)` / `start_processes` (PyTorch's DDP tutorial
    starts its ranks so): each child process would call `fn(i, *args)` on a GPU of its own
    (`_wrap`, torch/multiprocessing/spawn.py), outside the twin. Here the rank the run simulates
    (`--rank`, else 0) calls `fn(rank, *args)` in this process, under the capture; the other ranks
    do not run (the fake group's collectives need none of them). A spawned child would import the
    script again as `__mp_main__`; its top level is not run again here."""

    import torch.multiprocessing as tmp

    module = sys.modules["torch.multiprocessing.spawn"]

    class _Done:
        """What `start_processes(join=False)` returns: the rank has run."""

        def join(self, timeout=None, grace_period=None):
            return True

        def pids(self):
            return [os.getpid()]

    def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
        if rank < nprocs:
            fn(rank, *args)
        else:
            _twin_warning(
                f"spawn:{nprocs}",
                f"the script starts {nprocs} processes, rank {rank} not among them: none ran",
            )
        return None if join else _Done()

    def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
        return start_processes(fn, args, nprocs, join, daemon, start_method)

    for owner in (tmp, module):
        owner.start_processes = start_processes
        owner.spawn = spawn


def setup_from_script(cap) -> None:
    """Without `--nproc`, the script's own `init_process_group` says the world (its `world_size` and
    `rank`, else torchrun's WORLD_SIZE and RANK, else one process): the group is the fake one, as
    under `--nproc`, so a single-process NCCL group (world size 1) runs without a GPU."""
    import inspect

    import torch.distributed as dist

    original = dist.init_process_group
    sig = inspect.signature(original)

    def init_process_group(*args, **kwargs):
        from torch.testing._internal.distributed.fake_pg import FakeStore

        a = sig.bind(*args, **kwargs).arguments
        world, rank = a.get("world_size", -1), a.get("rank", -1)
        world = world if world != -1 else int(os.environ.get("WORLD_SIZE", "1"))
        rank = rank if rank != -1 else int(os.environ.get("RANK", "0"))
        _route_init(original)
        patch_ddp(world, cap)
        patch_fsdp()
        patch_dtensor()
        patch_works()
        patch_object_collectives()
        cap.world = (world, rank)
        patch_backend(a.get("backend"), a.get("device_id"))
        rest = {k: v for k, v in a.items() if k in ("timeout", "group_name", "pg_options")}
        return original("fake", store=FakeStore(), rank=rank, world_size=world, **rest)

    _route_init(init_process_group)
    patch_spawn(0)


def _route_init(fn) -> None:
    """Bind `init_process_group` to fn where scripts reach it: `torch.distributed`'s name and
    device_mesh's own import of it, which `init_device_mesh` calls with no arguments when no group
    exists yet (`_setup_world_group_and_device`, torch/distributed/device_mesh.py)."""
    import torch.distributed as dist

    dist.init_process_group = fn
    mesh = sys.modules.get("torch.distributed.device_mesh")
    if mesh is not None and hasattr(mesh, "init_process_group"):
        mesh.init_process_group = fn


def _allreduce_hook(world: int):
    """DDP's built-in allreduce (reducer.cpp: the bucket divided by the world size in place, then
    all-reduced in place) as a comm hook: the fake group's works carry no tensor for the reducer."""

    def hook(state, bucket):
        buf = bucket.buffer()
        buf.div_(world)
        fut = torch.futures.Future()
        fut.set_result(buf)
        return fut

    return hook


def _under_function_mode(cap, hook):
    """A Python comm hook run under the capture's function mode. The reducer calls it from the
    backward (reducer.cpp's `run_comm_hook`), which the program's `backward()` entered through that
    mode, popped for the call: without it a factory from data in the hook (PowerSGD's
    `torch.tensor([], device=device)` for a bucket with nothing left uncompressed, powerSGD_hook.py)
    builds on the host and copies to the host's CUDA in C++ (tensor_new.cpp) -- "Found no NVIDIA
    driver" -- where the GPU's makes a CUDA tensor."""

    @functools.wraps(hook)
    def run(state, bucket):
        mode = cap._modes[0]
        stack = [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]
        if any(m is mode for m in stack):
            return hook(state, bucket)
        torch._C._push_on_torch_function_stack(mode)
        try:
            return hook(state, bucket)
        finally:
            torch._C._pop_torch_function_stack()

    return run


def patch_ddp(world: int, cap=None) -> None:
    """Give every DistributedDataParallel whose script registers no comm hook of its own the
    built-in allreduce as a Python hook, at its first forward; run every Python hook under the
    capture's function mode (`_under_function_mode`)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    register, forward = DDP.register_comm_hook, DDP.forward

    def register_comm_hook(self, state, hook):
        self._vramscope_hooked = True
        return register(self, state, hook if cap is None else _under_function_mode(cap, hook))

    def register_builtin(self, comm_hook_type):
        raise RuntimeError("vramscope run --nproc: DDP's built-in C++ comm hooks are not simulated")

    def ddp_forward(self, *args, **kwargs):
        if not getattr(self, "_vramscope_hooked", False):
            self._vramscope_hooked = True
            register(self, None, _allreduce_hook(world))
        return forward(self, *args, **kwargs)

    DDP.register_comm_hook = register_comm_hook
    DDP._register_builtin_comm_hook = register_builtin
    DDP.forward = ddp_forward


@functools.cache
def _device_future_class():
    """A completed future of CUDA tensors, as ProcessGroupNCCL's work gives (`ivalue::Future` with the
    device: ProcessGroupNCCL.cpp's `future_`): each callback (`then`, `add_done_callback`) runs on a
    stream taken from the device's pool (`invokeCallback`'s `getStreamsFromPoolForDevices`,
    aten/src/ATen/core/ivalue_inl.h), and `then`'s future is such a future too. So a cuBLAS call in a
    callback (PowerSGD's `bmm`s in `compute_qs` and `decompress`, powerSGD_hook.py) makes a workspace
    for each pool stream it meets: workspaces are kept per (handle, stream)."""

    class DeviceFuture(torch.futures.Future):
        def _run(self, callback):
            from . import _capture, _cuda

            cap = _capture.current()
            if cap is None:
                return callback(self)
            with _cuda.pool_stream(cap):
                return callback(self)

        def then(self, callback):
            child = DeviceFuture()

            def run(_fut):
                try:
                    result = self._run(callback)
                except BaseException as e:  # the error goes to the future, as `then`'s does
                    child.set_exception(e)
                else:
                    child.set_result(result)

            if self.done():
                run(self)
            else:
                super().add_done_callback(run)
            return child

        def add_done_callback(self, callback):
            if self.done():
                self._run(callback)
            else:
                super().add_done_callback(lambda _fut: self._run(callback))

    # named as the future ProcessGroupNCCL's work gives (`torch.futures.Future`)
    DeviceFuture.__module__ = torch.futures.Future.__module__
    DeviceFuture.__name__ = DeviceFuture.__qualname__ = "Future"
    return DeviceFuture


def _device_future(values):
    fut = _device_future_class()()
    fut.set_result(values)
    return fut


@functools.cache
def _completed_work():
    """A `Work` that is complete at once and wraps the fake group's `work`: `wait` is the work's, the
    future completes with `values` where given (ProcessGroupNCCL's future holds the collective's
    tensors) and is the work's own otherwise; `held` lives as long as the work (a buffer the GPU's
    work holds)."""
    from torch._C._distributed_c10d import Work

    class CompletedWork(Work):
        def __init__(self, work, values=None, held=None, shelf=None):
            super().__init__()
            self._work, self._values, self._held = work, values, held
            # (group id, entry): this work's tensors on its group's shelf (`_stash`)
            self._shelf = shelf

        def wait(self, timeout=None):
            # `WorkNCCL::wait` -> `synchronizeStream`: the stashed tensors go (`unstash`)
            if self._shelf is not None:
                _unstash_entry(*self._shelf)
                self._shelf = None
            return self._work.wait() if timeout is None else self._work.wait(timeout)

        def synchronize(self):
            if self._shelf is not None:
                _unstash_entry(*self._shelf)
                self._shelf = None

        def is_completed(self):
            return True

        def get_future(self):
            if self._values is None:
                return self._work.get_future()
            if any(isinstance(v, torch.Tensor) and v.is_cuda for v in self._values):
                return _device_future(self._values)
            fut = torch.futures.Future()
            fut.set_result(self._values)
            return fut

    # named as the work a collective returns on the GPU: ProcessGroupNCCL's `WorkNCCL` has no binding
    # of its own, so Python sees its bound base class, `Work`
    CompletedWork.__module__ = Work.__module__
    CompletedWork.__name__ = CompletedWork.__qualname__ = "Work"
    return CompletedWork


def patch_works() -> None:
    """The fake group's works complete with no value; ProcessGroupNCCL's future completes with the
    collective's tensors (ProcessGroupNCCL.cpp: `future_->markCompleted(at::IValue(*work->outputs_))`),
    which DDP's comm hooks read (default_hooks.py's `fut.value()[0]`): an allreduce's or broadcast's
    work called from Python is given a future of its tensors."""
    from torch.distributed.distributed_c10d import ProcessGroup

    if getattr(ProcessGroup, "_vramscope_works", False):
        return

    def valued(original):
        def collective(self, tensors, *args, **kwargs):
            work = original(self, tensors, *args, **kwargs)
            values = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
            shelf = None
            if any(isinstance(v, torch.Tensor) and v.is_cuda for v in values):
                _nccl_stream()
                opts = kwargs.get("opts", args[0] if args else None)
                # the options' `asyncOp` (distributed_c10d.py sets it from `async_op`; the C++
                # structs' default is true, as for `pg.allreduce(tensors)`)
                if getattr(opts, "asyncOp", True):
                    shelf = _stash(self, [v for v in values if isinstance(v, torch.Tensor) and v.is_cuda])
            return _completed_work()(work, values=values, shelf=shelf)

        return collective

    ProcessGroup.allreduce = valued(ProcessGroup.allreduce)
    ProcessGroup.broadcast = valued(ProcessGroup.broadcast)
    ProcessGroup._vramscope_works = True
    from ._kernels.registry import NAMED_DISPATCH

    for name in _COLLECTIVES:
        NAMED_DISPATCH.setdefault(name, _enqueue)
    import torch.distributed as dist

    destroy = dist.destroy_process_group

    def destroy_process_group(group=None):
        # the group's shelves go with the ProcessGroupNCCL that owns them
        if group is None:
            _SHELVES.clear()
        else:
            _SHELVES.pop(id(group), None)
        return destroy(group)

    dist.destroy_process_group = destroy_process_group


#: ProcessGroupNCCL's shelves (`TensorShelf`): per process group (by id, the group kept with them),
#: the tensors of the asynchronous collectives made from Python whose works were not waited on
_SHELVES: dict = {}

#: c10d's collectives (the dispatcher ops every `ProcessGroup` method goes through, from Python or
#: from C++: the reducer's bucket broadcast, DDP's `_broadcast_coalesced`); each is an enqueue of
#: its group's work (ProcessGroupNCCL.cpp: `collective`, `collectiveCoalesced`, `pointToPoint`
#: end in `workEnqueue`)
_COLLECTIVES = (
    "c10d::_allgather_base_",
    "c10d::_reduce_scatter_base_",
    "c10d::allgather_",
    "c10d::allgather_coalesced_",
    "c10d::allgather_into_tensor_coalesced_",
    "c10d::allreduce_",
    "c10d::allreduce_coalesced_",
    "c10d::alltoall_",
    "c10d::alltoall_base_",
    "c10d::barrier",
    "c10d::broadcast_",
    "c10d::gather_",
    "c10d::recv_",
    "c10d::recv_any_source_",
    "c10d::reduce_",
    "c10d::reduce_scatter_",
    "c10d::reduce_scatter_tensor_coalesced_",
    "c10d::scatter_",
    "c10d::send",
)


def _stash(group, tensors):
    """An asynchronous collective's tensors on its group's shelf: ProcessGroupNCCL::collective
    stashes an `asyncOp` collective's inputs and outputs on its work
    (`stashed_for_allocator_safety_->stash`, TORCH_NCCL_AVOID_RECORD_STREAMS being the default in
    PyTorch 2.11) and they are released only by `work.wait()` (`synchronizeStream` -> `unstash`) or,
    once the watchdog thread has found the work completed and moved its shelf to the group's
    `shelvesToUnstash_`, by the main thread's next `workEnqueue` on that group. A comm hook's
    `fut.then(...)` waits on the future, not the work (default_hooks.py's `_compress_hook`), so a
    `bf16_compress_hook`'s bf16 copy of each bucket outlives the hook. The twin takes the
    watchdog as having seen every earlier work done by then (it polls every 100 ms: a later free on
    the GPU is timing, not modelled), so a stashed tensor lives until the group's next collective
    (`_enqueue`) or its work's `wait()`: the earliest the GPU can free it. Returns the work's
    handle on the shelf."""
    if not tensors:
        return None
    entry = list(tensors)
    _SHELVES.setdefault(id(group), (group, []))[1].append(entry)
    return (id(group), entry)


def _unstash_entry(key, entry) -> None:
    held = _SHELVES.get(key)
    if held is not None:
        held[1][:] = [e for e in held[1] if e is not entry]


def _enqueue(cap, func, args, kwargs):
    """A collective on a group releases the tensors earlier collectives left on that group's shelf
    (`ProcessGroupNCCL::workEnqueue`: "We clean up the TensorShelf's in case user hasn't called
    `work.wait()`", `shelvesToUnstash_`), then runs as the twin runs it."""
    if _SHELVES:
        from torch.distributed.distributed_c10d import ProcessGroup

        for a in args:
            if isinstance(a, torch.ScriptObject) and a._type().qualified_name().endswith("c10d.ProcessGroup"):
                _SHELVES.pop(id(ProcessGroup.unbox(a)), None)
    return NotImplemented


def patch_backend(backend, device_id) -> None:
    """`torch.distributed.get_backend` reads for the fake group the name the GPU's group has, as
    `init_process_group` names it: the backend asked for (`Backend(name)`: "nccl",
    "cuda:nccl,cpu:gloo"), else the device's default when a `device_id` is given ("nccl" for CUDA),
    else "undefined"; so library code that branches on it (torch/distributed/nn/functional.py's
    all_gather backward: a reduce-scatter under NCCL, an all_to_all otherwise) takes the GPU's branch.
    c10d's own name keeps "fake". Where CUDA tensors go through NCCL (that name, a device map naming
    it, or "undefined", whose CUDA backend is NCCL), ProcessGroupNCCL's own tensors follow
    (`patch_nccl_buffers`)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if backend is None and device_id is not None:
        backend = dist.Backend.default_device_backend_map.get(torch.device(device_id).type)
    name = dist.Backend(str(backend) if backend is not None else "undefined")
    real_get_backend = c10d.get_backend

    def get_backend(group=None):
        real = real_get_backend(group)
        return name if real == "fake" else real

    dist.get_backend = get_backend
    # "undefined" on a CUDA machine maps CUDA alone to NCCL (BackendConfig); a name with "cpu:gloo"
    # sends barriers to the CPU unless a device is bound (`barrier`, `_get_object_coll_device`)
    single = name in ("nccl", "undefined")
    # `_get_object_coll_device`: the group's one device type, else "cpu" where it has a CPU backend;
    # the fake group lists every device type (cpu among them), the GPU's NCCL group CUDA alone, so
    # object collectives (DCP's plans too) pickle into CUDA byte tensors there
    real_coll_device = getattr(c10d._get_object_coll_device, "_vramscope_real", c10d._get_object_coll_device)

    def coll_device(group=None):
        g = group or c10d._get_default_group()
        if real_get_backend(g) == "fake" and single:
            return "cuda"
        return real_coll_device(group)

    coll_device._vramscope_real = real_coll_device
    c10d._get_object_coll_device = coll_device
    if single or "cuda:nccl" in name.replace(" ", ""):
        patch_nccl_buffers(cuda_barrier=single or device_id is not None)
        if device_id is not None:
            _nccl_stream()  # the communicator is made at once (`eager_connect_single_device`)


def _nccl_stream() -> None:
    """ProcessGroupNCCL's communicator takes its stream from the device's low-priority pool when it
    is made (`initNCCLComm`: `getStreamFromPool(options_->is_high_priority_stream)`,
    ProcessGroupNCCL.cpp): at `init_process_group` with a `device_id`, else at the first collective.
    The pool's later takers (a CUDA future's callbacks) count on from there. The first
    `getStreamFromPool` of the process makes the device's stream pools, 70 MiB outside the allocator
    that `mem_get_info` sees (`Runtime::stream_pools`, measured: mx2_stream_pool_probe_s61_h100.txt),
    unless a `torch.cuda.Stream` made them before."""
    from . import _capture, _cuda

    cap = _capture.current()
    if cap is not None and not cap.__dict__.get("_vramscope_nccl_stream"):
        cap._vramscope_nccl_stream = True
        _cuda.pool_index(cap)
        take = getattr(cap.device, "stream_pools", None)
        if take is not None:  # a native module built before has none
            take()


def patch_nccl_buffers(cuda_barrier: bool) -> None:
    """What c10d allocates on the device beyond the program's tensors, for a script whose CUDA
    tensors go through NCCL. A barrier on the CUDA device (`cuda_barrier`: the group's only device,
    or one bound by `device_id`; else `device_ids` given) sets ProcessGroup::barrier's `static`
    `empty({1}, kByte)` (ProcessGroup.hpp: the new one made before the old one goes, one kept between
    barriers) and ProcessGroupNCCL::barrier all-reduces a `zeros({1}, kFloat)`, freed when it
    returns. `allgather` into a list of same-size tensors gathers into `newLikeFlat(outputs)` (one
    stacked tensor) and copies it out, `reduce_scatter` from such a list copies it into
    `newLikeFlat(inputs)` first (ProcessGroupNCCL.cpp); the work holds that tensor (`outputs_` / its
    stash), freed here with the work."""
    from torch.distributed.distributed_c10d import ProcessGroup

    if getattr(ProcessGroup, "_vramscope_nccl", False):
        return
    static = []

    def flat(tensors):
        if not tensors or any(t.shape != tensors[0].shape for t in tensors):
            return None
        return torch.empty(
            (len(tensors), *tensors[0].shape), dtype=tensors[0].dtype, device=tensors[0].device
        )

    real_barrier, real_allgather, real_reduce_scatter = (
        ProcessGroup.barrier,
        ProcessGroup.allgather,
        ProcessGroup.reduce_scatter,
    )

    def barrier(self, *args, **kwargs):
        opts = kwargs.get("opts", args[0] if args else None)
        device = getattr(opts, "device", None)
        here = device is not None and torch.device(device).type == "cuda"
        on_cuda = here or cuda_barrier or bool(list(getattr(opts, "device_ids", None) or []))
        if on_cuda and not here:  # the twin's barrier is on the CPU: the static one is made here
            static[:] = [torch.empty(1, dtype=torch.uint8, device="cuda")]
        work = real_barrier(self, *args, **kwargs)  # on CUDA, ProcessGroup::barrier's own static
        if on_cuda:
            torch.zeros(1, dtype=torch.float32, device="cuda")  # barrierTensor, freed on return
        return work

    def allgather(self, outputs, inputs, *args, **kwargs):
        work = real_allgather(self, outputs, inputs, *args, **kwargs)
        if isinstance(outputs, (list, tuple)) and len(outputs) == 1 and isinstance(outputs[0], (list, tuple)):
            buf = flat(list(outputs[0]))
            if buf is not None and buf.is_cuda:
                for j, out in enumerate(outputs[0]):
                    out.copy_(buf[j])
                return _completed_work()(work, held=buf)
        return work

    def reduce_scatter(self, outputs, inputs, *args, **kwargs):
        buf = None
        if isinstance(inputs, (list, tuple)) and len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            buf = flat(list(inputs[0]))
            if buf is not None and buf.is_cuda:
                for j, t in enumerate(inputs[0]):
                    buf[j].copy_(t)
        work = real_reduce_scatter(self, outputs, inputs, *args, **kwargs)
        return _completed_work()(work, held=buf) if buf is not None else work

    ProcessGroup.barrier = barrier
    ProcessGroup.allgather = allgather
    ProcessGroup.reduce_scatter = reduce_scatter
    ProcessGroup._vramscope_nccl = True


def patch_object_collectives() -> None:
    """Object collectives (`all_gather_object`, `gather_object`, `scatter_object_list`,
    `broadcast_object_list`, DCP's plans) pickle each object into a byte tensor on the device, move
    it through the group and unpickle what arrives (distributed_c10d.py's `_object_to_tensor` and
    `_tensor_to_object`). The fake group moves no data, so what arrives is stand-in zeros, which do
    not unpickle. The twin's choice: every rank sent what this rank sent (one program on every rank),
    so a slot that does not unpickle is the object this rank pickled for the call (for a scatter
    from this rank, the one for its rank). The byte tensors are allocated as on the GPU."""
    import functools

    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if getattr(c10d, "_vramscope_objects", False):
        return
    sent: list = []
    real_to_tensor, real_to_object = c10d._object_to_tensor, c10d._tensor_to_object

    def to_tensor(obj, device, group):
        sent.append(obj)
        return real_to_tensor(obj, device, group)

    def to_object(tensor, tensor_size, group):
        try:
            return real_to_object(tensor, tensor_size, group)
        except Exception:
            if not sent:
                _twin_warning(
                    "object:unknown",
                    "an object another rank sent (broadcast_object_list, recv_object_list) is not known "
                    "here: it reads None",
                )
                return None
            rank = c10d.get_rank(group)
            return sent[rank] if len(sent) > 1 and 0 <= rank < len(sent) else sent[-1]

    def fresh(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            sent.clear()
            return fn(*args, **kwargs)

        return call

    c10d._object_to_tensor, c10d._tensor_to_object = to_tensor, to_object
    for name in (
        "all_gather_object",
        "gather_object",
        "scatter_object_list",
        "broadcast_object_list",
        "send_object_list",
        "recv_object_list",
    ):
        fn = getattr(c10d, name, None)
        if fn is None:
            continue
        wrapped = fresh(fn)
        setattr(c10d, name, wrapped)
        if getattr(dist, name, None) is fn:
            setattr(dist, name, wrapped)
    c10d._vramscope_objects = True


def patch_dcp_plan_check() -> None:
    """torch.distributed.checkpoint's coordinator checks that the chunks of all ranks' save plans
    cover every tensor (`_validate_global_plan`, torch/distributed/checkpoint/default_planner.py).
    The other ranks' plans here are this rank's (`patch_object_collectives`), which cover 1/N of a
    sharded tensor, so the check can hold only on the GPUs: under the fake group it is not made.
    What the plans then give this rank to write is read on the host (no device memory)."""
    from torch.distributed import distributed_c10d as c10d
    from torch.distributed.checkpoint import default_planner

    real = default_planner._validate_global_plan
    if getattr(real, "_vramscope", False):
        return

    def validate(global_plan, metadata):
        if c10d.is_initialized() and c10d.get_backend(c10d._get_default_group()) in ("fake",):
            return True
        return real(global_plan, metadata)

    validate._vramscope = True
    default_planner._validate_global_plan = validate


def patch_fsdp() -> None:
    """`fully_shard` moves a module's CPU parameters with `param.data = param.to(device)`, which
    cannot hold between a host tensor and a simulated one: here each is given its device copy by
    `torch.utils.swap_tensors` (what `_move_states_to_device` does for wrapper subclasses), so the
    same Parameter objects hold it, as on a GPU. `contract`'s check then holds them in its
    `OrderedDict(module.named_parameters())` until `fully_shard` returns, and frees the full
    copies first to last, as the GPUs' traces show."""
    from torch.distributed.fsdp._fully_shard import _fsdp_init
    from torch.distributed.tensor import DTensor

    move = _fsdp_init._move_states_to_device

    def move_states_to_device(params, buffers, device):
        seen: set[int] = set()
        for t in (*params, *buffers):
            if t.device == device or t.device.type == "meta" or isinstance(t, DTensor) or id(t) in seen:
                continue
            seen.add(id(t))
            with torch.no_grad():
                moved = t.to(device)
            if isinstance(t, torch.nn.Parameter):
                moved = torch.nn.Parameter(moved, t.requires_grad)
            torch.utils.swap_tensors(t, moved)
        move(params, buffers, device)

    _fsdp_init._move_states_to_device = move_states_to_device


def patch_dtensor() -> None:
    """A DTensor takes its device from its local tensor in C++ (`_dtensor__new__`), where a
    simulated tensor is a meta one: a DTensor over a simulated local tensor is made here as the
    same wrapper on `cuda:0`."""
    from torch.distributed.tensor import DTensor

    from ._tensor import registered

    original = DTensor.__new__

    def new(cls, local_tensor, spec, *, requires_grad):
        if not registered(local_tensor):
            return original(cls, local_tensor, spec, requires_grad=requires_grad)
        meta = spec.tensor_meta
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            meta.shape,
            strides=meta.stride,
            dtype=local_tensor.dtype,
            device=torch.device("cuda", 0),
            layout=local_tensor.layout,
            requires_grad=requires_grad,
        )
        r._spec = spec
        r._local_tensor = local_tensor
        return r

    DTensor.__new__ = new
    _decomposed_strategies_on_meta()


def _decomposed_strategies_on_meta() -> None:
    """DTensor's sharding propagation for an op without a strategy of its own (`mish`, `softplus`)
    runs the op's decomposition once per candidate placement on meta tensors it makes
    (`torch.empty(..., device="meta")`, `DecompShardingStrategy._propagate_through_decomp`,
    torch/distributed/tensor/_decompositions.py): genuine meta tensors, which hold no device memory.
    Below the twin's function mode (the op's own call) such a factory would read as the simulated
    device's, so the tracing runs with the program's meta device marked genuine."""
    from torch.distributed.tensor import _decompositions

    from . import _capture

    strategy = _decompositions.DecompShardingStrategy
    propagate = strategy.__dict__["_propagate_through_decomp"].__func__
    if getattr(propagate, "_vramscope", False):
        return

    def propagate_through_decomp(*args, **kwargs):
        cap = _capture.current()
        if cap is None:
            return propagate(*args, **kwargs)
        cap.genuine_meta += 1
        try:
            return propagate(*args, **kwargs)
        finally:
            cap.genuine_meta -= 1

    propagate_through_decomp._vramscope = True
    strategy._propagate_through_decomp = staticmethod(propagate_through_decomp)

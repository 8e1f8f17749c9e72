"""The GPU checks that need plain torch rather than a whole training run
(used by bench/gpu_check.py).

Fused AdamW against the unfused one, pinned non-blocking copies overlapping compute on a second
stream, a real CUDA OOM (memory filled until an allocation fails) in the forward pass and in the
optimizer step, each retried in place after the ballast is freed, and torch.compile against eager.
Each check runs under `guarded`, so one that raises is recorded as a failed figure with its error
instead of ending the whole GPU check.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

import common

# Ballast chunks: big ones fill the GPU quickly, small ones leave less than
# one optimizer state free.
BIG_CHUNK_BYTES = 1 << 30
SMALL_CHUNK_BYTES = 16 << 20


def guarded(result: common.Result, name: str, check: Callable[[common.Result], None]) -> None:
    """Run one check; an exception becomes a failed figure naming the error
    (the other checks still run)."""
    try:
        check(result)
    except Exception as exc:  # a broken GPU path is what this tool exists to find: record it, go on
        result.add(
            f"{name}: ran",
            None,
            "",
            "runs without error",
            False,
            f"{type(exc).__name__}: {exc}"[:300],
        )
        result.notes.append(f"{name} failed: {traceback.format_exc(limit=3)[-1500:]}")


def run_torch_checks(result: common.Result) -> None:
    guarded(result, "fused AdamW", check_fused_adamw)
    guarded(result, "pinned non-blocking copies", check_copy_overlap)
    guarded(result, "OOM in the forward pass", check_oom_forward)
    guarded(result, "OOM in the optimizer step", check_oom_optimizer)
    guarded(result, "torch.compile", check_compile)
    import torch

    # later checks run in subprocesses: hand this process's cached memory back
    torch.cuda.empty_cache()


def _mlp(width: int = 2048, depth: int = 4) -> Any:
    import torch

    layers: list[Any] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).cuda()


def _timed_cuda(fn: Callable[[], Any], repeats: int = 20) -> float:
    """Median seconds of `fn` after two warm-up calls, synchronised so the
    GPU's work is inside the timing."""
    import torch

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return common.median(times)


def check_fused_adamw(result: common.Result) -> None:
    """Fused and for-each AdamW from the same weights and gradients: same
    update, and the fused one's speed."""
    import torch

    torch.manual_seed(0)
    model = _mlp()
    twin = _mlp()
    twin.load_state_dict(model.state_dict())
    x = torch.randn(256, 2048, device="cuda")
    for net in (model, twin):
        net(x).square().mean().backward()
    fused = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    plain = torch.optim.AdamW(twin.parameters(), lr=1e-3, foreach=True)
    fused.step()
    plain.step()
    diff = max(
        (a - b).abs().max().item()
        for a, b in zip(model.parameters(), twin.parameters(), strict=True)
    )
    result.add("fused AdamW minus for-each AdamW after one step", diff, "", "<= 1e-5", diff <= 1e-5)
    ratio = _timed_cuda(plain.step) / _timed_cuda(fused.step)
    result.add(
        "fused AdamW step speed / for-each",
        ratio,
        "x",
        "",
        None,
        "16.8M parameters, gradients kept",
    )


def check_copy_overlap(result: common.Result) -> None:
    """Host-to-device copies from pinned memory on a side stream, overlapping
    matrix products on the main one."""
    import torch

    host = [torch.randn(64, 1024, 1024).pin_memory() for _ in range(4)]  # 4 x 256 MiB
    a = torch.randn(8192, 8192, device="cuda")
    side = torch.cuda.Stream()

    def compute() -> None:
        # About as long as the copies (fp32 products, ~20 ms each on an H100):
        # overlap can hide most of one.
        for _ in range(2):
            a @ a

    def copies() -> None:
        for block in host:
            block.to("cuda", non_blocking=True)

    def serial() -> None:
        copies()
        torch.cuda.synchronize()
        compute()

    def overlapped() -> None:
        with torch.cuda.stream(side):
            copies()
        compute()

    alone = _timed_cuda(compute, 5) + _timed_cuda(copies, 5)
    ratio = _timed_cuda(serial, 5) / _timed_cuda(overlapped, 5)
    detail = (
        "1 GiB pinned host->device next to 2 fp32 8192^3 products; each alone, summed"
        f" {alone * 1e3:.1f} ms"
    )
    result.add(
        "copies overlapping compute: serial time / overlapped",
        ratio,
        "x",
        "> 1.1",
        ratio > 1.1,
        detail,
    )


def _fill_gpu() -> list[Any]:
    """Allocate until an allocation fails: the GPU is full (a real CUDA OOM each
    time), the ballast is returned."""
    import torch

    ballast: list[Any] = []
    for chunk in (BIG_CHUNK_BYTES, SMALL_CHUNK_BYTES):
        while True:
            try:
                ballast.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
            except torch.cuda.OutOfMemoryError:
                break
    return ballast


def _recover(name: str, result: common.Result, action: Callable[[], Any]) -> None:
    """`action` on a full GPU must raise a CUDA OOM; after freeing the
    ballast the same call must succeed."""
    import torch

    ballast = _fill_gpu()
    filled = sum(t.numel() for t in ballast)
    try:
        action()
        raised = False
    except torch.cuda.OutOfMemoryError:
        raised = True
    ballast.clear()
    torch.cuda.empty_cache()
    action()  # in place: the same model and optimizer objects, nothing rebuilt
    detail = (
        f"ballast {common.format_value(filled / 2**30, 'GiB')} until the allocator refused, then"
        " freed"
    )
    result.add(
        f"real CUDA OOM in the {name}, retried in place",
        float(raised),
        "",
        "1 (raised, then ran)",
        raised,
        detail,
    )


def check_oom_forward(result: common.Result) -> None:
    import torch

    model = _mlp()
    x = torch.randn(4096, 2048, device="cuda")
    _recover("forward pass", result, lambda: model(x).sum().backward())


def check_oom_optimizer(result: common.Result) -> None:
    """The first AdamW step allocates its moments (twice the parameters): on
    a full GPU that step fails."""
    import torch

    model = _mlp(4096, 8)  # 134M parameters: 1 GiB of moments to allocate at the first step
    model(torch.randn(64, 4096, device="cuda")).square().mean().backward()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in list(model.parameters())[:2]]
    _recover("optimizer step", result, lambda: _step_dropping_half_made_state(optimizer))
    moved = any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=False))
    result.add("optimizer step after the OOM updated the weights", float(moved), "", "1", moved)


def _step_dropping_half_made_state(optimizer: Any) -> None:
    # An OOM inside AdamW's first step leaves a parameter's state half made (a step count,
    # no moments; seen on an H200): the retry starts those parameters' state afresh, or it
    # fails with KeyError 'exp_avg'.
    for param in [p for p, state in optimizer.state.items() if "exp_avg" not in state]:
        del optimizer.state[param]
    optimizer.step()


def check_compile(result: common.Result) -> None:
    """A training step of the same MLP, torch.compile'd against eager (compile
    time reported, not in the ratio)."""
    import torch

    model = _mlp()
    x = torch.randn(512, 2048, device="cuda")
    compiled = torch.compile(model)

    def step(net: Any) -> Callable[[], None]:
        return lambda: net(x).square().mean().backward()

    started = time.perf_counter()
    step(compiled)()
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - started
    ratio = _timed_cuda(step(model)) / _timed_cuda(step(compiled))
    detail = f"first compiled step (compiling) {compile_s:.1f} s"
    result.add("torch.compile step speed / eager", ratio, "x", "runs", True, detail)

"""cuda_oom: the culprit runs out of GPU memory in its forward pass after the last step
(torch.OutOfMemoryError) and exits 1; everybody else times out 10 minutes later."""

from __future__ import annotations

from rankwatch.simulate.fleet import Rank
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.pytorch import SITE, destroy_warning, excepthook
from rankwatch.simulate.scenarios.common import full_baseline, timeouts_for_all
from rankwatch.simulate.scenarios.spec import Scenario
from rankwatch.simulate.teardown import run_fleet


def build(job: Job) -> None:
    full_baseline(job)
    cul = job.culprit
    T = job.culprit_time()
    lines = [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 301, in <module>',
        "    main()",
        '  File "/workspace/train.py", line 249, in main',
        "    loss = model(**batch).loss",
        "           ^^^^^^^^^^^^^^^",
        f'  File "{SITE}/torch/nn/modules/module.py", line 1751, in _wrapped_call_impl',
        "    return self._call_impl(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{SITE}/torch/nn/modules/module.py", line 1762, in _call_impl',
        "    return forward_call(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/workspace/model.py", line 412, in forward',
        "    logits = self.lm_head(hidden_states).float()",
        "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        _oom_message(job, cul),
    ]
    excepthook(job, cul, T, lines, root_at=len(lines) - 1)
    destroy_warning(job, cul, T + 0.15)
    job.set_exit(cul, T + 0.3, 1)
    job.root_meta = (cul.rank, cul.host.name, "pt_cuda_oom")
    timeouts_for_all(job, skip=[cul.rank])
    job.notes.append(
        f"rank {cul.rank} on {cul.host.name} ran out of GPU memory at true t={T:.3f}s and "
        "exited 1; everybody else times out 10 minutes later."
    )
    run_fleet(job)


def _oom_message(job: Job, cul: Rank) -> str:
    rng = job.rng
    total = 79.10
    free = round(rng.uniform(0.4, 1.9), 2)
    used = round(total - free, 2)
    alloc = round(used - rng.uniform(2.5, 4.0), 2)
    reserved = round(rng.uniform(0.8, 2.4), 2)
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU "
        f"{cul.local} has a total capacity of {total:.2f} GiB of which {free:.2f} GiB is "
        f"free. Process {cul.pid} has {used:.2f} GiB memory in use. Of the allocated memory "
        f"{alloc:.2f} GiB is allocated by PyTorch, and {reserved:.2f} GiB is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


SCENARIO = Scenario(
    name="cuda_oom",
    about="one rank runs out of GPU memory (torch.OutOfMemoryError)",
    build=build,
    nccl="2.26.2",
    transport="IB",
)

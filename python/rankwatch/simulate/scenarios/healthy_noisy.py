"""healthy_noisy: a healthy run with the scary but harmless lines real jobs print: two CUDA
driver versions, P2P disabled between two GPUs of one host, connect retries, and dynamo
recompile warnings. No diagnosis expected."""

from __future__ import annotations

from rankwatch.simulate.job import Job
from rankwatch.simulate.scenarios.healthy import train_to_the_end
from rankwatch.simulate.scenarios.spec import Scenario


def build(job: Job) -> None:
    train_to_the_end(job, noisy=True)
    job.notes.append(
        "clean run with two CUDA driver versions, P2P-disabled INFO, connect retries and "
        "dynamo recompile warnings; no diagnosis expected"
    )


SCENARIO = Scenario(
    name="healthy_noisy",
    about="a healthy run with the scary but harmless lines real jobs print",
    build=build,
    nccl="2.27.7",
    transport="IB",
    injects_failure=False,
    connect_retry_p=0.3,
    noisy_fleet=True,
)

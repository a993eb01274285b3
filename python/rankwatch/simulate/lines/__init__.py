"""How each producer in a torchrun/NCCL job prints its lines: NCCL INFO/WARN (`nccl`,
`nccl_init`), c10 and Python (`pytorch`, `watchdog`), the torchrun agent (`torchrun`), the
kernel (`kernel`); the host clocks that stamp them (`clock`), the version tables the formats
depend on (`versions`) and how a written line is kept and flagged (`records`).

Every emitter takes the `Job` being generated and a true time; it formats the line with the
host's (skewed) clock and appends it to the process's records."""

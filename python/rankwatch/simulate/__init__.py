"""Synthetic fleets: the logs a failed (or healthy) torchrun/NCCL job leaves behind, with the
ground truth (root-cause rank, host and line). `rankwatch simulate` writes them to a folder or
replays them into Kafka, which is how the demo runs and how users test their own pipelines."""

from rankwatch.simulate.fleetgen import LAYOUTS, SCENARIOS, Truth, check_truth, generate

__all__ = ["LAYOUTS", "SCENARIOS", "Truth", "check_truth", "generate"]

"""rankwatch: find the rank, host, GPU and line that started a distributed-training failure.

The engine (decoder, Hyperscan classification, ring buffers, correlation) is Rust
(`rankwatch._core`); this package adds the catalog loader, local analysis, the CLI and the
Kafka daemon.
"""

from rankwatch._core import hyperscan_version
from rankwatch.catalog_loader import Catalog, CatalogError
from rankwatch.engine import Decoder, Diagnosis, Engine, EngineConfig

__all__ = [
    "Catalog",
    "CatalogError",
    "Decoder",
    "Diagnosis",
    "Engine",
    "EngineConfig",
    "hyperscan_version",
]
__version__ = "0.1.0"

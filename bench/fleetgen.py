"""The fleet log generator moved into the package: `rankwatch.simulate.fleetgen` (command line:
`rankwatch simulate`). This shim keeps `import fleetgen` (with bench/ on sys.path) and
`python bench/fleetgen.py ...` working; both are that module."""

from __future__ import annotations

import sys

from rankwatch.simulate import fleetgen as _fleetgen

if __name__ == "__main__":
    sys.exit(_fleetgen.main())
sys.modules[__name__] = _fleetgen

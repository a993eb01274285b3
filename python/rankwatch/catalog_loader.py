"""Finding and loading signature catalog files: the shipped ones plus the user's."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from rankwatch import _core
from rankwatch.safe_text import printable

BUILTIN_DIR = Path(__file__).parent / "catalog"


class CatalogError(ValueError):
    """A catalog file could not be read or failed validation (the message names file and id)."""


def catalog_files(extra: Iterable[str | Path] = (), include_builtin: bool = True) -> list[Path]:
    """The TOML files to load: the shipped catalog, then each extra file or folder."""
    files: list[Path] = []
    if include_builtin:
        files.extend(sorted(BUILTIN_DIR.glob("*.toml")))
    for item in extra:
        p = Path(item)
        if p.is_dir():
            found = sorted(p.rglob("*.toml"))
            if not found:
                raise CatalogError(f"{printable(p)}: folder holds no .toml catalog files")
            files.extend(found)
        elif p.exists():
            files.append(p)
        else:
            raise CatalogError(f"{printable(p)}: no such catalog file or folder")
    for f in files:
        if not f.is_file():  # a FIFO would block the read, a device never end
            raise CatalogError(f"{printable(f)}: not a regular file")
    return files


class Catalog:
    """The validated signature catalog, compiled into one Hyperscan database.

    The compiled database is cached in `$RANKWATCH_CACHE_DIR` (empty: no cache), else
    `$XDG_CACHE_HOME/rankwatch`, else `~/.cache/rankwatch`; `use_cache=False` bypasses it.
    A stale or damaged cache file is ignored and replaced, never an error.
    """

    def __init__(
        self,
        extra: Sequence[str | Path] = (),
        include_builtin: bool = True,
        use_cache: bool = True,
    ) -> None:
        sources: list[tuple[str, str]] = []
        for f in catalog_files(extra, include_builtin):
            try:
                sources.append((printable(f, limit=None), f.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError) as e:
                raise CatalogError(f"{printable(f)}: cannot read catalog file: {e}") from None
        try:
            self._core = _core.Catalog(sources, use_cache)
        except _core.CatalogError as e:
            raise CatalogError(str(e)) from None
        self.files = [Path(s[0]) for s in sources]
        note = self._core.cache_note
        if note and note.startswith("cache not written"):
            # Every start compiles the catalog again (1-2 s) until this is fixed: say why.
            print(
                f"rankwatch: the compiled catalog is not cached ({note}); set "
                "RANKWATCH_CACHE_DIR to a directory of yours, or to an empty value to turn "
                "the cache off",
                file=sys.stderr,
            )
        elif note and os.environ.get("RANKWATCH_DEBUG"):
            print(f"rankwatch: catalog {note}", file=sys.stderr)

    @property
    def database_origin(self) -> str:
        """ "cache" when the compiled database came from the cache, else "compiled"."""
        return self._core.database_origin

    @property
    def cache_path(self) -> Path | None:
        """The cache file consulted, or None when no cache was in use."""
        path = self._core.cache_path
        return Path(path) if path is not None else None

    def __len__(self) -> int:
        return len(self._core)

    def ids(self) -> list[str]:
        return self._core.ids()

    def signatures(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = orjson.loads(self._core.signatures_json())
        return result

    def signature(self, sig_id: str) -> dict[str, Any] | None:
        return next((s for s in self.signatures() if s["id"] == sig_id), None)

    def test(self, line: str, year: int = 2026) -> dict[str, Any]:
        """Peels and classifies one line the way the engine does."""
        result: dict[str, Any] = orjson.loads(self._core.test_line(line, year))
        return result

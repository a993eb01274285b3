"""The recent diagnoses behind /incidents: the latest version of each id, at most `limit`, the
least recently updated forgotten first."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import orjson

from rankwatch.alert.received import AnyReceived, Received, received


class IncidentStore:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_id: OrderedDict[str, Received] = OrderedDict()

    def put(self, d: AnyReceived) -> bool:
        """Stores `d`; False if this exact version was already stored (a redelivery)."""
        r = received(d)
        old = self._by_id.get(r.id)
        if old is not None and _same(old, r):
            return False
        self._by_id[r.id] = r
        self._by_id.move_to_end(r.id)
        while len(self._by_id) > self.limit:
            self._by_id.popitem(last=False)
        return True

    def put_new(self, d: AnyReceived) -> None:
        """Stores `d` only if its id is unknown (a reader that may lag behind another one
        never replaces a newer version)."""
        r = received(d)
        if r.id not in self._by_id:
            self.put(r)

    def entry(self, did: str) -> Received | None:
        return self._by_id.get(did)

    def get(self, did: str) -> dict[str, Any] | None:
        """The diagnosis as published."""
        r = self._by_id.get(did)
        return None if r is None else r.doc

    def recent(self) -> list[Received]:
        return list(reversed(self._by_id.values()))

    def __len__(self) -> int:
        return len(self._by_id)


def _same(a: Received, b: Received) -> bool:
    # The documents, not the typed reads: a field only a newer engine writes is a change too.
    return orjson.dumps(a.doc, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        b.doc, option=orjson.OPT_SORT_KEYS
    )

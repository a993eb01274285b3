"""The recent diagnoses behind /incidents: the latest version of each id, at most `limit`, the
least recently updated forgotten first."""

from __future__ import annotations

from collections import OrderedDict

import orjson

from rankwatch.report import Diagnosis


class IncidentStore:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_id: OrderedDict[str, Diagnosis] = OrderedDict()

    def put(self, d: Diagnosis) -> bool:
        """Stores `d`; False if this exact version was already stored (a redelivery)."""
        did = d["id"]
        old = self._by_id.get(did)
        if old is not None and _same(old, d):
            return False
        self._by_id[did] = d
        self._by_id.move_to_end(did)
        while len(self._by_id) > self.limit:
            self._by_id.popitem(last=False)
        return True

    def put_new(self, d: Diagnosis) -> None:
        """Stores `d` only if its id is unknown (a reader that may lag behind another one
        never replaces a newer version)."""
        if d["id"] not in self._by_id:
            self.put(d)

    def get(self, did: str) -> Diagnosis | None:
        return self._by_id.get(did)

    def recent(self) -> list[Diagnosis]:
        return list(reversed(self._by_id.values()))

    def __len__(self) -> int:
        return len(self._by_id)


def _same(a: Diagnosis, b: Diagnosis) -> bool:
    return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        b, option=orjson.OPT_SORT_KEYS
    )

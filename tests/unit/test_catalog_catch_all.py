"""Catch-all signatures (`catch_all = true`) stand only where nothing specific matched the line."""

from __future__ import annotations

from rankwatch import Catalog


def xid_ids_for(catalog: Catalog, number: int) -> list[str]:
    line = f"NVRM: Xid (PCI:0000:3b:00): {number}, pid=4242, name=python, Ch 00000008"
    return sorted(h["id"] for h in catalog.test(line)["hits"] if h["id"].startswith("xid_"))


def test_every_xid_number_is_one_xid_signature(catalog: Catalog) -> None:
    """An Xid with an entry of its own is that entry alone, even where the entry weighs less
    than the catch-all (Xid 43); every other number is `xid_other`."""
    specific = {
        int(n): s["id"]
        for s in catalog.signatures()
        if s["id"].startswith("xid_")
        for n in s["id"].removeprefix("xid_").split("_")
        if n.isdigit()
    }
    assert {43, 79, 119} <= specific.keys()
    for number in range(1000):
        assert xid_ids_for(catalog, number) == [specific.get(number, "xid_other")], number

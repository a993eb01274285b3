"""The NCCL and PyTorch builds a generated job runs, and the parts of their output that depend
on the build: where NCCL's WARN sites and return-code breadcrumbs are, and the line numbers
ProcessGroupNCCL.cpp logs from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NcclBuild:
    ver: str
    cuda: str
    torch: str

    @property
    def minor(self) -> int:
        return int(self.ver.split(".")[1])

    @property
    def code(self) -> int:
        a, b, c = (int(x) for x in self.ver.split("."))
        return a * 10000 + b * 100 + c

    @property
    def banner(self) -> str:
        return f"NCCL version {self.ver}+cuda{self.cuda}"

    @property
    def init_api(self) -> str:
        """What precedes ``comm %p rank ...`` in Init START/COMPLETE."""
        if self.minor <= 20:
            return ""
        if self.minor <= 22:
            return "ncclCommInitRank "
        return "ncclCommInitRankConfig "


NCCL_BUILDS = {
    "2.18.3": NcclBuild("2.18.3", "12.2", "2.5"),
    "2.21.5": NcclBuild("2.21.5", "12.4", "2.5"),
    "2.26.2": NcclBuild("2.26.2", "12.2", "2.7"),
    "2.27.7": NcclBuild("2.27.7", "12.9", "2.9"),
}

# file:line of NCCL WARN sites and of the first `-> N` return-code breadcrumbs, per version
WARN_SITES: dict[str, dict[str, str]] = {
    "2.18.3": {"mismatch": "init.cc:601"},
    "2.21.5": {
        "connect": "misc/socket.cc:484",
        "closed": "misc/socket.cc:47",
        "reset": "misc/socket.cc:51",
        "async": "transport/net_ib.cc:90",
        "wc": "transport/net_ib.cc:1696",
        "mismatch": "init.cc:683",
    },
    "2.26.2": {"closed": "misc/socket.cc:64", "wc": "transport/net_ib.cc:2332"},
    "2.27.7": {
        "closed": "misc/socket.cc:64",
        "shm_extend": "misc/shmutils.cc:97",
        "shm_seg": "misc/shmutils.cc:153",
        "wc": "transport/net_ib.cc:2362",
    },
}
RETURN_CHAINS: dict[str, tuple[str, ...]] = {
    "connect": (
        "misc/socket.cc:565",
        "misc/socket.cc:668",
        "bootstrap.cc:274",
        "init.cc:1387",
        "init.cc:1628",
        "init.cc:1664",
    ),
    "root": ("misc/socket.cc:565", "misc/socket.cc:668", "bootstrap.cc:181"),
    "closed": (
        "misc/socket.cc:752",
        "bootstrap.cc:92",
        "bootstrap.cc:574",
        "init.cc:1126",
        "init.cc:1628",
        "init.cc:1664",
    ),
    "net_closed": ("misc/socket.cc:829", "transport/net_socket.cc:584", "transport/net.cc:1339"),
    "wc": ("transport/net_ib.cc:1706", "transport/net.cc:1329"),
    "shm": (
        "misc/shmutils.cc:161",
        "transport/shm.cc:134",
        "transport.cc:43",
        "transport.cc:167",
        "init.cc:1270",
        "init.cc:1822",
    ),
    "mismatch": ("init.cc:684", "init.cc:1628", "init.cc:1664"),
}

# ProcessGroupNCCL.cpp line numbers per torch build (shape matters, not the exact numbers)
PG_SOURCE_LINES: dict[str, dict[str, int]] = {
    "2.5": {
        "opts": 877,
        "envs": 895,
        "created": 2196,
        "barrier": 4131,
        "timeout": 616,
        "timeout_raise": 618,
        "faildet": 1715,
        "stack": 1757,
        "firstpg": 1750,
        "dumpsig": 1741,
        "some": 623,
        "take": 629,
        "term": 1601,
        "wd_raise": 1604,
        "err_raise": 1969,
        "desync": 1729,
        "heart": 1423,
        "fatal": 1452,
        "destroy": 1250,
        "check": 2335,
    },
    "2.7": {
        "opts": 947,
        "envs": 958,
        "created": 2711,
        "barrier": 4813,
        "timeout": 632,
        "timeout_raise": 635,
        "faildet": 2017,
        "stack": 670,
        "firstpg": 2028,
        "dumpsig": 1784,
        "some": 684,
        "take": 698,
        "term": 1895,
        "wd_raise": 1899,
        "err_raise": 2347,
        "desync": 2042,
        "heart": 1423,
        "fatal": 1463,
        "destroy": 1496,
        "check": 3356,
    },
    "2.9": {
        "opts": 1012,
        "envs": 1025,
        "created": 2932,
        "barrier": 5092,
        "timeout": 685,
        "timeout_raise": 688,
        "faildet": 2129,
        "stack": 720,
        "firstpg": 2140,
        "dumpsig": 1893,
        "some": 736,
        "take": 750,
        "term": 2070,
        "wd_raise": 2074,
        "err_raise": 2459,
        "desync": 2154,
        "heart": 1551,
        "fatal": 1590,
        "destroy": 1567,
        "check": 3528,
    },
}
WATCHDOG_FUNC = {"2.5": "ncclCommWatchdog", "2.7": "ncclCommWatchdog", "2.9": "run"}

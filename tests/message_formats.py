"""Message templates of NCCL, PyTorch and Gloo (../shared/reference/messages/*.tsv) turned into
log lines as those programs print them, for checking the catalog's coverage.

Each printf conversion, `{{NAME}}` macro or `{expr}` field is replaced by a plausible value
chosen from the text just before it (an address after "to", an errno text after "failed :",
a number elsewhere), and the message is put inside a real line prefix: NCCL's WARN prefix
with the source file, c10's glog-like prefix, torchelastic's logging prefix, a Python
exception line, or Gloo's bracketed `[<file>:<line>]` inside one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MESSAGES_DIR = Path(__file__).resolve().parent.parent.parent / "shared" / "reference" / "messages"

# Tags before v2.18.1-1: formats whose last tag is one of these are out of the target set.
TAGS_BEFORE_2_18 = frozenset(
    [
        "v2.10.3-1",
        "v2.11.4-1",
        "v2.12.7-1",
        "v2.12.10-1",
        "v2.12.12-1",
        "v2.13.4-1",
        "v2.14.3-1",
        "v2.15.1-1",
        "v2.15.5-1",
        "v2.16.2-1",
        "v2.16.5-1",
        "v2.17.1-1",
    ]
)

PRINTF = re.compile(
    r"%[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|z|j|t|L)?([diouxXeEfgGcspn])"
)
MACRO = re.compile(r"\{\{(\w+)\}\}")
# torch.tsv fields: `{expr}`, `{}`, and Python %-style logging arguments.
TORCH_FIELD = re.compile(r"\{[^{}]*\}|%[-+ #0]*\d*(?:\.\d+)?[sdifrx]")

ERRNO_TEXT = "Network is unreachable"
ADDRESS = "10.20.3.21<51844>"


@dataclass(frozen=True)
class Template:
    level: str
    files: tuple[str, ...]
    last_tag: str
    format: str


@dataclass(frozen=True)
class Instance:
    template: Template
    line: str


def read_tsv(name: str) -> list[Template]:
    """Rows of one table; torch.tsv has no first-seen column, the others do."""
    rows = (MESSAGES_DIR / name).read_text(encoding="utf-8").splitlines()[1:]
    out = []
    for row in rows:
        cols = row.split("\t")
        files = tuple(f.strip().removesuffix("?") for f in cols[1].split(","))
        last = cols[2] if name == "torch.tsv" else cols[3]
        out.append(Template(cols[0], files, last, cols[-1]))
    return out


def nccl_warns_since_2_18() -> list[Template]:
    return [
        t for t in read_tsv("nccl.tsv") if t.level == "WARN" and t.last_tag not in TAGS_BEFORE_2_18
    ]


# What a `{{name}}` macro parameter stands for, by the file that uses it.
MACRO_VALUES = {
    "misc/ibvwrap.cc": "ibv_reg_mr",
    "misc/mlx5dvwrap.cc": "mlx5dv_reg_dmabuf_mr",
    "misc/nvmlwrap.cc": "nvmlDeviceGetHandleByPciBusId",
}


def _value_for(before: str, conv: str) -> str:
    """A plausible value for one conversion, given the text that precedes it."""
    tail = before[-40:].lower()
    if conv == "s":
        if tail.endswith("call to "):
            return "recv from"
        if tail.endswith("while "):
            return "creating"
        if re.search(r"event ?: ?$", tail):
            return "port error"
        if re.search(r"(?:failed|error|errno \d+|returned)\s*:?\s*\(?$", tail):
            return ERRNO_TEXT
        if re.search(r"(?:to|from|address|addr|peer|host|with)\s*$", tail):
            return ADDRESS
        if re.search(r"(?:dev|device|hca|nic|port)\s*:?\s*$", tail):
            return "mlx5_0"
        if re.search(r"(?:file|path|library|lib|open)\s*:?\s*$", tail):
            return "libgdrapi.so.2" if tail.endswith("open ") else "/dev/shm/nccl-Xy12Ab"
        return "ncclAllReduce"
    if conv == "p":
        return "0x7f3a5c001230"
    if conv in "xX":
        return "1f"
    if conv == "c":
        return "Y"
    if conv in "eEfgG":
        return "1.5"
    return "3"


def _substitute(fmt: str, src: str) -> str:
    fmt = fmt.split("\\n")[0] or fmt  # NCCL prints text after a newline as a line of its own
    fmt = fmt.replace("\\n", " ").replace('\\"', '"').replace("\\t", " ")
    fmt = MACRO.sub(lambda m: MACRO_VALUES.get(src, "socket"), fmt)
    out: list[str] = []
    pos = 0
    for m in PRINTF.finditer(fmt):
        out.append(fmt[pos : m.start()])
        out.append(_value_for("".join(out), m.group(1)))
        pos = m.end()
    out.append(fmt[pos:])
    return "".join(out).replace("%%", "%").strip()


def nccl_line(t: Template) -> Instance:
    src = t.files[0].removeprefix("src/")
    msg = _substitute(t.format, src)
    return Instance(t, f"node17:4012:4088 [3] {src}:1234 NCCL WARN {msg}")


# Values for torch.tsv fields, by words in the field's expression (first match wins).
TORCH_VALUES: list[tuple[tuple[str, ...], str]] = [
    (("logprefix",), "[PG ID 0 PG GUID 0(default_pg) Rank 3] "),
    (
        ("*this", "work)", "{work}"),
        "WorkNCCL(SeqNum=52, OpType=ALLREDUCE, NumelIn=11, NumelOut=11, Timeout(ms)=600000)",
    ),
    (("what()", "strerror", "error", "err_name", "msg", "reason"), "Connection reset by peer"),
    (("timeout", "elapsed", "duration", "ms", "seconds"), "600000"),
    (("addr", "host", "endpoint", "url"), "node-03"),
    (("file", "path", "dir"), "/tmp/torch_debug_3.log"),
    (("key",), "/default_pg/0//cuda//0"),
    (("exitcode", "exit code"), "1"),
    (("process ", "pid"), "4012"),
    (("socket",), "SocketImpl(fd=45, addr=[node-03]:48262, remote=[node-01]:29500)"),
    (("signal", "sig"), "SIGTERM"),
    (
        (
            "rank",
            "size",
            "count",
            "num",
            "seq",
            "id",
            "port",
            "code",
            "pid",
            "errno",
            "res",
            "min",
            "max",
            "expected",
            "actual",
            "world",
            "line",
            "fd",
            "len",
            "index",
            "version",
        ),
        "3",
    ),
]


def _torch_value(field: str, before: str) -> str:
    inner = field.strip("{}%").lower()
    if inner in ("*this", "work"):
        return TORCH_VALUES[1][1]
    if inner in ("", "s", "d", "r", "i", "f", "x"):
        inner = before[-12:].lower()  # a bare placeholder: judge by the words just before it
    return next((v for words, v in TORCH_VALUES if any(w in inner for w in words)), "value")


def torch_message(fmt: str) -> str:
    fmt = fmt.replace("\\n", " ").replace("\\t", " ").replace('\\"', '"').replace("\\\\", "\\")
    out: list[str] = []
    pos = 0
    for m in TORCH_FIELD.finditer(fmt):
        out.append(fmt[pos : m.start()])
        out.append(_torch_value(m.group(0), "".join(out)))
        pos = m.end()
    out.append(fmt[pos:])
    return "".join(out).strip()


def torch_line(t: Template) -> Instance:
    """The line shape a torch message takes, by how it is emitted."""
    msg = torch_message(t.format)
    file = t.files[0]
    base = file.rsplit("/", 1)[-1]
    letter = {"ERROR": "E", "WARNING": "W", "INFO": "I"}.get(t.level.split("(")[0], "E")
    if t.level.startswith("EXCEPTION:"):
        kind = t.level.removeprefix("EXCEPTION:")
        name = {
            "c10::Error": "RuntimeError",
            "c10::Error(internal assert)": "RuntimeError",
            "std::runtime_error": "RuntimeError",
            "std::system_error": "RuntimeError",
            "std::invalid_argument": "ValueError",
            "DistBackendError": "torch.distributed.DistBackendError",
            "DistStoreError": "torch.distributed.DistStoreError",
            "DistNetworkError": "torch.distributed.DistNetworkError",
            "SocketError": "torch.distributed.DistNetworkError",
        }.get(kind, kind)
        return Instance(t, f"[rank3]: {name}: {msg}")
    if file.endswith((".cpp", ".hpp", ".h")):
        c10d = "[c10d] " if "(c10d)" in t.level else ""
        prefix = f"[rank3]:[{letter}1130 12:00:01.123456789 {base}:616] "
        return Instance(t, prefix + c10d + msg)
    return Instance(t, f"{letter}1130 12:00:01.123000 4012 {file}:900] {msg}")


# aws-ofi-nccl (aws-ofi-nccl.tsv) and libfabric's EFA/CXI providers (libfabric-efa-cxi.tsv).

# aws-ofi-nccl tags before v1.14.2: formats whose last tag is one of these are out of the
# target set.
OFI_TAGS_BEFORE_1_14 = frozenset(
    [
        "v0.9",
        "v0.9.2",
        "v1.0.1-aws",
        "v1.1.5-aws",
        "v1.2.0-aws",
        "v1.3.0-aws",
        "v1.4.0-aws",
        "v1.5.0-aws",
        "v1.6.0",
        "v1.7.4-aws",
        "v1.8.1-aws",
        "v1.9.2-aws",
        "v1.10.0-aws",
        "v1.11.1-aws",
        "v1.12.1-aws",
        "v1.13.2-aws",
    ]
)
OFI_PACKAGE = {"{{PACKAGE_NAME}}": "aws-ofi-nccl", "{{PACKAGE_STRING}}": "aws-ofi-nccl 1.14.2"}


def ofi_warns_since_1_14() -> list[Template]:
    return [
        t
        for t in read_tsv("aws-ofi-nccl.tsv")
        if t.level == "WARN" and t.last_tag not in OFI_TAGS_BEFORE_1_14
    ]


def _ofi_function(src: str) -> str:
    """The `<func>:<line>` slot of a plugin WARN: the function (its full C++ signature from
    v1.15 on), or the file for the pthread wrappers."""
    if src.endswith(".h") and "pthread" in src:
        return f"{src}:57"
    base = src.rsplit("/", 1)[-1].split(".")[0]
    if src.endswith((".cpp", ".hpp")) or "/" in src.removeprefix("src/"):
        return f"int nccl_net_ofi_{base}_t::process(nccl_net_ofi_req_t*, int, void**):811"
    return f"{base}_process:811"


def ofi_line(t: Template) -> Instance:
    """A plugin message as NCCL's logger prints it: `NET/OFI ` + format behind NCCL's prefix
    (WARN with the plugin's function in the file slot, INFO without one)."""
    fmt = t.format
    for macro, value in OFI_PACKAGE.items():
        fmt = fmt.replace(macro, value)
    src = t.files[-1]
    msg = _substitute(fmt, src)
    if t.level == "INFO":
        return Instance(t, f"ip-10-0-1-5:4012:4088 [3] NCCL INFO NET/OFI {msg}")
    return Instance(t, f"ip-10-0-1-5:4012:4088 [3] {_ofi_function(src)} NCCL WARN NET/OFI {msg}")


def libfabric_rows() -> list[Template]:
    return read_tsv("libfabric-efa-cxi.tsv")


# libfabric's log prefix by release: v1.8-v1.13 without a time, v1.14 with one, v1.15 on with
# the (usually empty) log prefix field.
LIBFABRIC_FORM_1_13 = frozenset(["v1.8.1", "v1.9.1", "v1.10.1", "v1.11.2", "v1.12.1", "v1.13.2"])


def libfabric_line(t: Template) -> Instance:
    """A provider warning as libfabric writes it with FI_LOG_LEVEL=warn: its prefix in the form
    of the last release that has the format, the CXI macros' host name before the text."""
    src = t.files[0]
    prov = "cxi" if src.startswith("prov/cxi") else "efa"
    func = src.rsplit("/", 1)[-1].split(".")[0]
    fmt = t.format.replace("\\t", " ").replace("%s(%d)", "Cannot allocate memory(12)")
    msg = _substitute(fmt, src)
    if prov == "cxi":
        msg = f"nid001234: {msg}"
    if t.last_tag in LIBFABRIC_FORM_1_13:
        head = f"libfabric:4012:{prov}:ep_ctrl"
    elif t.last_tag == "v1.14.1":
        head = f"libfabric:4012:1701234567:{prov}:ep_ctrl"
    else:
        head = f"libfabric:4012:1701234567::{prov}:ep_ctrl"
    return Instance(t, f"{head}:{func}():812<warn> {msg}")


# Gloo (gloo.tsv). Values by the words just before a placeholder, first match wins: a peer
# address as `peer_.str()` prints it, an errno text, a store key, a device name, a number.
GLOO_ADDRESS = "[10.20.3.21]:51844"
GLOO_ERRNO_TEXT = "Connection reset by peer"
GLOO_VALUES: list[tuple[str, str]] = [
    (r"(?:remote|local)=$", GLOO_ADDRESS),
    (r"error=$", f"SO_ERROR: Connection refused, remote={GLOO_ADDRESS}"),
    (r"key\(s\): $", "rank_1"),
    (r"connected to: \[$", "1, 2"),
    (r"(?:device named: |device=)$", "mlx5_0"),
    (r"(?:Can't find |\w in |:)$", "libssl.so.3"),
    (r"(?::|=) $", GLOO_ERRNO_TEXT),
    (r"(?:connect|peer|timeout|from|error|closed|writev|SSL_read|SSL_write|to|->) $", GLOO_ADDRESS),
    (r"->$", GLOO_ADDRESS),
]
GLOO_SOURCE_PREFIX = "../third_party/gloo/"


def _gloo_value(before: str, conv: str) -> str:
    if conv == "d":
        return "0" if before.endswith("willRetry=") else "3"
    return next((v for pattern, v in GLOO_VALUES if re.search(pattern, before)), "ring")


def gloo_message(fmt: str) -> str:
    fmt = fmt.replace("\\n", " ").replace('\\"', '"')
    out: list[str] = []
    pos = 0
    for m in PRINTF.finditer(fmt):
        out.append(fmt[pos : m.start()])
        out.append(_gloo_value("".join(out), m.group(1)))
        pos = m.end()
    out.append(fmt[pos:])
    return "".join(out).replace("%%", "%").strip()


def gloo_rows(*levels: str) -> list[Template]:
    """gloo.tsv rows whose level starts with one of `levels`."""
    return [t for t in read_tsv("gloo.tsv") if t.level.startswith(levels)]


def gloo_line(t: Template, shape: str = "raise") -> Instance:
    """The line a Gloo message takes where users meet it.

    `raise`: PyTorch's Gloo process group re-raises Gloo's exceptions as RuntimeError, whose
    text is Gloo's own `[<file>:<line>] ` (EnforceNotMet: `[enforce fail at <file>:<line>] `)
    and the message. `terminate`: the `what():` line that follows an uncaught one. Gloo's log
    macros and the libuv transport write `[<file>:<line>] <LEVEL> ` or `[<file>:<line>] ` to
    stderr.
    """
    msg = gloo_message(t.format)
    where = f"{GLOO_SOURCE_PREFIX}{t.files[0]}:123"
    kind = t.level.removeprefix("EXCEPTION:")
    if kind == "gloo::EnforceNotMet":
        text = f"[enforce fail at {where}] {msg}"
    elif kind.startswith("gloo::") or t.level == "TCP_ERROR":
        if t.level == "TCP_ERROR":
            where = f"{GLOO_SOURCE_PREFIX}gloo/transport/tcp/pair.cc:123"
        twice = msg.startswith("Wait timeout for key")
        text = f"[{where}] " + (f"[{where}] " if twice else "") + msg
    elif kind.startswith("std::"):
        text = msg
    elif t.level.endswith("(stderr)"):
        return Instance(t, f"[{where}] {msg}")
    else:
        return Instance(t, f"[{where}] {t.level} {msg}")
    if shape == "terminate":
        return Instance(t, f"  what():  {text}")
    name = "ValueError" if kind == "std::invalid_argument" else "RuntimeError"
    return Instance(t, f"[rank3]: {name}: {text}")

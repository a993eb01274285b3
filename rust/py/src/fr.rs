//! The Flight Recorder functions of `rankwatch._core`: dumps read (one by one, or a batch of
//! files on a few threads), their checked entries kept in Rust (`FrEntries`), and the
//! cross-rank analysis.

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use rankwatch_core::flight_recorder as fr;
use rankwatch_core::flight_recorder_analysis as fra;
use rankwatch_core::flight_recorder_files as frf;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fr_read_pickle, m)?)?;
    m.add_function(wrap_pyfunction!(fr_read_files, m)?)?;
    m.add_function(wrap_pyfunction!(fr_analyze, m)?)?;
    m.add_class::<PyFrEntries>()?;
    Ok(())
}

/// The top-level values the Python checks read, converted (shared nodes once); `None` when a
/// value is outside what the fast path converts (a big integer, nesting deeper than a dump's).
fn fr_value<'py>(
    py: Python<'py>,
    doc: &fr::Doc<'_>,
    id: u32,
    depth: u32,
    memo: &mut std::collections::HashMap<u32, Bound<'py, PyAny>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    use pyo3::types::{PyDict, PyTuple};
    use pyo3::IntoPyObjectExt;
    if let Some(got) = memo.get(&id) {
        return Ok(Some(got.clone()));
    }
    if depth > 6 {
        return Ok(None);
    }
    let mut items = |ids: &[u32]| -> PyResult<Option<Vec<Bound<'py, PyAny>>>> {
        let mut out = Vec::with_capacity(ids.len());
        for &i in ids {
            match fr_value(py, doc, i, depth + 1, memo)? {
                Some(v) => out.push(v),
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    };
    let v = match doc.node(id) {
        fr::Node::None => py.None().into_bound(py),
        fr::Node::Bool(b) => b.into_bound_py_any(py)?,
        fr::Node::Int(i) => i.into_bound_py_any(py)?,
        fr::Node::BigInt => return Ok(None),
        fr::Node::Float(f) => f.into_bound_py_any(py)?,
        fr::Node::Str(..) => doc.text(id).unwrap_or_default().into_bound_py_any(py)?,
        fr::Node::Bytes(..) => PyBytes::new(py, doc.bytes(id).unwrap_or_default()).into_any(),
        fr::Node::List(_) => match items(doc.seq(id))? {
            Some(v) => PyList::new(py, v)?.into_any(),
            None => return Ok(None),
        },
        fr::Node::Tuple(_) => match items(doc.seq(id))? {
            Some(v) => PyTuple::new(py, v)?.into_any(),
            None => return Ok(None),
        },
        fr::Node::Dict(_) => {
            let d = PyDict::new(py);
            for (k, v) in doc.pairs(id) {
                let (Some(k), Some(v)) = (
                    fr_value(py, doc, k, depth + 1, memo)?,
                    fr_value(py, doc, v, depth + 1, memo)?,
                ) else {
                    return Ok(None);
                };
                d.set_item(k, v)?;
            }
            d.into_any()
        }
    };
    memo.insert(id, v.clone());
    Ok(Some(v))
}

/// Reads a pickled Flight Recorder dump on the fast path: `(top, entries, start)` where
/// `top` holds the dump's `version`, `rank`, `pg_config` and `pg_status` as decoded,
/// `entries` the checked entries kept (an `FrEntries`) and `start` the index of the first one
/// kept; `None` when the dump is anything but clean (refused, malformed, an entry that fails
/// a check, over the work limit), for the Python reader to decide and explain. Decoding and
/// checking release the GIL.
#[pyfunction]
#[pyo3(signature = (data, keep_last, work_limit))]
#[allow(clippy::type_complexity)]
fn fr_read_pickle<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyBytes>,
    keep_last: Option<usize>,
    work_limit: Option<usize>,
) -> PyResult<Option<(Bound<'py, pyo3::types::PyDict>, PyFrEntries, usize)>> {
    use pyo3::types::PyDict;
    let bytes = data.as_bytes();
    let got = py.detach(|| {
        let doc = fr::parse(bytes).ok()?;
        let checked = fr::check(&doc, keep_last, work_limit)?;
        Some((doc, checked))
    });
    let Some((doc, c)) = got else {
        return Ok(None);
    };
    let top = PyDict::new(py);
    let mut memo = std::collections::HashMap::new();
    for key in ["version", "rank", "pg_config", "pg_status"] {
        if let Some(id) = doc.get(doc.root, key) {
            match fr_value(py, &doc, id, 0, &mut memo)? {
                Some(v) => top.set_item(key, v)?,
                None => return Ok(None),
            }
        }
    }
    let start = c.start;
    Ok(Some((top, PyFrEntries { inner: Arc::new(c) }, start)))
}

/// A top-level value of a dump as Python values.
fn py_value<'py>(py: Python<'py>, v: &frf::Value) -> PyResult<Bound<'py, PyAny>> {
    use pyo3::types::{PyDict, PyTuple};
    use pyo3::IntoPyObjectExt;
    let items = |vs: &[frf::Value]| -> PyResult<Vec<Bound<'py, PyAny>>> {
        vs.iter().map(|v| py_value(py, v)).collect()
    };
    Ok(match v {
        frf::Value::None => py.None().into_bound(py),
        frf::Value::Bool(b) => b.into_bound_py_any(py)?,
        frf::Value::Int(i) => i.into_bound_py_any(py)?,
        frf::Value::Float(f) => f.into_bound_py_any(py)?,
        frf::Value::Str(s) => s.into_bound_py_any(py)?,
        frf::Value::Bytes(b) => PyBytes::new(py, b).into_any(),
        frf::Value::List(vs) => PyList::new(py, items(vs)?)?.into_any(),
        frf::Value::Tuple(vs) => PyTuple::new(py, items(vs)?)?.into_any(),
        frf::Value::Dict(pairs) => {
            let d = PyDict::new(py);
            for (k, v) in pairs {
                d.set_item(py_value(py, k)?, py_value(py, v)?)?;
            }
            d.into_any()
        }
    })
}

/// Reads the pickled dumps at `paths` on up to `threads` threads without the GIL (see
/// `rankwatch_core::flight_recorder_files`): per path `(top, entries, start)` as
/// `fr_read_pickle` gives them, or `None` for a file left to the Python reader (not a
/// regular file, over `max_bytes`, not a clean pickled dump).
#[pyfunction]
#[pyo3(signature = (paths, keep_last, max_bytes, threads))]
#[allow(clippy::type_complexity)]
fn fr_read_files<'py>(
    py: Python<'py>,
    paths: Vec<PathBuf>,
    keep_last: Option<usize>,
    max_bytes: u64,
    threads: usize,
) -> PyResult<Vec<Option<(Bound<'py, pyo3::types::PyDict>, PyFrEntries, usize)>>> {
    use pyo3::types::PyDict;
    let got = py.detach(|| frf::read_dumps(&paths, keep_last, max_bytes, threads));
    let mut out = Vec::with_capacity(got.len());
    for taken in got {
        let Some(t) = taken else {
            out.push(None);
            continue;
        };
        let top = PyDict::new(py);
        for (key, v) in &t.top {
            top.set_item(*key, py_value(py, v)?)?;
        }
        let start = t.checked.start;
        out.push(Some((
            top,
            PyFrEntries {
                inner: Arc::new(t.checked),
            },
            start,
        )));
    }
    Ok(out)
}

/// One dump's checked entries, kept in Rust (each shared value once); `take` builds the
/// `Entry` tuples of the ones asked for.
#[pyclass(name = "FrEntries", module = "rankwatch._core", frozen)]
struct PyFrEntries {
    inner: Arc<fr::Checked>,
}

#[pymethods]
impl PyFrEntries {
    fn __len__(&self) -> usize {
        self.inner.entries.len()
    }

    /// The entries at `index` (each in range), as `entry_cls` tuples with `frame_cls` frames.
    fn take<'py>(
        &self,
        py: Python<'py>,
        index: Vec<usize>,
        entry_cls: &Bound<'py, PyAny>,
        frame_cls: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let n = self.inner.entries.len();
        if let Some(bad) = index.iter().find(|&&i| i >= n) {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "entry {bad} of {n}"
            )));
        }
        fr_rows(py, &self.inner, &index, entry_cls, frame_cls)
    }

    /// The process groups its entries belong to, each once.
    fn pg_names(&self) -> Vec<String> {
        let mut seen = HashSet::new();
        self.inner
            .groups
            .iter()
            .filter(|(name, _)| seen.insert(name.as_str()))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Bytes held, roughly.
    fn heap_bytes(&self) -> usize {
        self.inner.heap_bytes()
    }

    /// The entries the Python reader checked (`Entry` tuples, in order), kept the same way.
    #[staticmethod]
    fn from_entries(entries: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut b = fr::Builder::default();
        for item in entries.try_iter()? {
            b.push(owned_entry(&item?)?);
        }
        Ok(PyFrEntries {
            inner: Arc::new(b.finish()),
        })
    }
}

/// An `Entry` tuple's values (the field order of `rankwatch.flight_recorder.model.Entry`).
fn owned_entry(e: &Bound<'_, PyAny>) -> PyResult<fr::OwnedEntry> {
    let t = e.cast::<pyo3::types::PyTuple>()?;
    let state: String = t.get_item(15)?.extract()?;
    let state = fr::STATES
        .iter()
        .position(|s| *s == state)
        .ok_or_else(|| PyValueError::new_err(format!("state {state:?}")))? as u8;
    let frames: Vec<(String, i64, String)> = t.get_item(21)?.extract()?;
    Ok(fr::OwnedEntry {
        pos: t.get_item(0)?.extract()?,
        record_id: t.get_item(1)?.extract()?,
        pg: t.get_item(2)?.extract()?,
        pg_desc: t.get_item(3)?.extract()?,
        pg_id: t.get_item(4)?.extract()?,
        seq: t.get_item(5)?.extract()?,
        p2p_seq: t.get_item(6)?.extract()?,
        is_p2p: t.get_item(7)?.extract()?,
        op: t.get_item(8)?.extract()?,
        backend: t.get_item(9)?.extract()?,
        peers: t.get_item(10)?.extract()?,
        input_sizes: t.get_item(11)?.extract()?,
        output_sizes: t.get_item(12)?.extract()?,
        input_dtypes: t.get_item(13)?.extract()?,
        output_dtypes: t.get_item(14)?.extract()?,
        state,
        retired: t.get_item(16)?.extract()?,
        time_created_ns: t.get_item(17)?.extract()?,
        time_started_ns: t.get_item(18)?.extract()?,
        time_completed_ns: t.get_item(19)?.extract()?,
        timeout_ms: t.get_item(20)?.extract()?,
        frames: frames
            .into_iter()
            .map(|(filename, line, name)| fr::Frame {
                filename,
                line,
                name,
            })
            .collect(),
    })
}

/// `Entry` tuples of the entries at `index` (the shared values built once per call).
fn fr_rows<'py>(
    py: Python<'py>,
    c: &fr::Checked,
    index: &[usize],
    entry_cls: &Bound<'py, PyAny>,
    frame_cls: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    use pyo3::types::PyTuple;
    use pyo3::IntoPyObjectExt;
    let tuple_new = py.get_type::<PyTuple>().getattr(intern!(py, "__new__"))?;
    let text = |s: &str| -> PyResult<Bound<'py, PyAny>> { s.into_bound_py_any(py) };
    let states: Vec<Bound<'py, PyAny>> = fr::STATES
        .iter()
        .map(|s| text(s))
        .collect::<PyResult<_>>()?;
    let ops: Vec<Bound<'py, PyAny>> = c.ops.iter().map(|s| text(s)).collect::<PyResult<_>>()?;
    let mut names = Vec::with_capacity(c.names.len());
    for n in &c.names {
        let peers = match n.peers {
            None => py.None().into_bound(py),
            Some((a, b)) => (a, b).into_bound_py_any(py)?,
        };
        names.push((text(&n.backend)?, ops[n.op as usize].clone(), peers));
    }
    let groups: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)> = c
        .groups
        .iter()
        .map(|(a, b)| Ok((text(a)?, text(b)?)))
        .collect::<PyResult<_>>()?;
    let mut shapes = Vec::with_capacity(c.shapes.len());
    for s in &c.shapes {
        let inner: Vec<Bound<'py, PyTuple>> = s
            .iter()
            .map(|dims| PyTuple::new(py, dims))
            .collect::<PyResult<_>>()?;
        shapes.push(PyTuple::new(py, inner)?.into_any());
    }
    let mut dtypes = Vec::with_capacity(c.dtypes.len());
    for d in &c.dtypes {
        dtypes.push(PyTuple::new(py, d)?.into_any());
    }
    let mut frames = Vec::with_capacity(c.frames.len());
    for f in &c.frames {
        let row = (f.filename.as_str(), f.line, f.name.as_str()).into_pyobject(py)?;
        frames.push(tuple_new.call1((frame_cls, row))?);
    }
    let mut frame_lists = Vec::with_capacity(c.frame_lists.len());
    for l in &c.frame_lists {
        frame_lists.push(PyTuple::new(py, l.iter().map(|&i| &frames[i as usize]))?.into_any());
    }
    let mut fps = Vec::with_capacity(c.fps.len());
    for k in &c.fps {
        fps.push(
            PyTuple::new(
                py,
                [
                    &ops[k[0] as usize],
                    &shapes[k[1] as usize],
                    &shapes[k[2] as usize],
                    &dtypes[k[3] as usize],
                    &dtypes[k[4] as usize],
                ],
            )?
            .into_any(),
        );
    }
    let out = PyList::empty(py);
    let none = py.None().into_bound(py);
    let opt = |v: Option<i64>| -> PyResult<Bound<'py, PyAny>> {
        match v {
            None => Ok(none.clone()),
            Some(v) => v.into_bound_py_any(py),
        }
    };
    for &i in index {
        let e = &c.entries[i];
        let (backend, op, peers) = &names[e.name as usize];
        let (pg, pg_desc) = &groups[e.group as usize];
        let row = PyTuple::new(
            py,
            [
                e.pos().into_bound_py_any(py)?,
                e.record_id.into_bound_py_any(py)?,
                pg.clone(),
                pg_desc.clone(),
                opt(e.pg_id())?,
                e.seq.into_bound_py_any(py)?,
                opt(e.p2p_seq())?,
                e.is_p2p.into_bound_py_any(py)?,
                op.clone(),
                backend.clone(),
                peers.clone(),
                shapes[e.input_sizes as usize].clone(),
                shapes[e.output_sizes as usize].clone(),
                dtypes[e.input_dtypes as usize].clone(),
                dtypes[e.output_dtypes as usize].clone(),
                states[e.state as usize].clone(),
                e.retired().into_bound_py_any(py)?,
                opt(e.time_created_ns())?,
                opt(e.time_started_ns())?,
                opt(e.time_completed_ns())?,
                opt(e.timeout_ms())?,
                frame_lists[e.frames as usize].clone(),
                fps[e.fp as usize].clone(),
            ],
        )?;
        out.append(tuple_new.call1((entry_cls, row))?)?;
    }
    Ok(out)
}

/// A finding as `analysis.py` takes it: (kind, pg, pg_desc, pg_id, seq, culprits,
/// other_ranks, entry, other, peer, missing_dumps, tie), entries as (dump, index).
type FindingTuple = (
    &'static str,
    String,
    String,
    Option<i64>,
    i64,
    Vec<i64>,
    Vec<i64>,
    Option<(u32, u32)>,
    Option<(u32, u32)>,
    Option<i64>,
    Vec<i64>,
    bool,
);

/// The cross-rank analysis of the dumps `tables` (one per rank, `ranks` in the same order):
/// `(findings, shown, groups)`, shown as (rank, why, dump, index). `members` maps a group
/// to its global ranks where a dump's configuration states them. Runs without the GIL.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn fr_analyze(
    py: Python<'_>,
    tables: Vec<PyRef<'_, PyFrEntries>>,
    ranks: Vec<i64>,
    members: std::collections::HashMap<String, Vec<i64>>,
) -> PyResult<(Vec<FindingTuple>, Vec<(i64, &'static str, u32, u32)>, usize)> {
    if tables.len() != ranks.len() {
        return Err(PyValueError::new_err("one rank per table"));
    }
    let held: Vec<Arc<fr::Checked>> = tables.iter().map(|t| t.inner.clone()).collect();
    drop(tables);
    let a = py.detach(|| {
        let inputs: Vec<fra::Input<'_>> = held
            .iter()
            .zip(&ranks)
            .map(|(dump, &rank)| fra::Input { rank, dump })
            .collect();
        fra::analyze(&inputs, &members)
    });
    let at = |a: Option<fra::At>| a.map(|a| (a.dump, a.entry));
    let findings = a
        .findings
        .into_iter()
        .map(|f| {
            (
                f.kind.as_str(),
                f.pg,
                f.pg_desc,
                f.pg_id,
                f.seq,
                f.culprits,
                f.other_ranks,
                at(f.entry),
                at(f.other),
                f.peer,
                f.missing_dumps,
                f.tie,
            )
        })
        .collect();
    let shown = a
        .shown
        .into_iter()
        .map(|s| (s.rank, s.why.as_str(), s.entry.dump, s.entry.entry))
        .collect();
    Ok((findings, shown, a.groups))
}

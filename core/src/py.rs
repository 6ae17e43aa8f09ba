//! The Python face: `arbiter_core.decide_batch`, one call per partition batch.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::batch::{decide_key, Config, Record};
use crate::decide::Limits;
use crate::rules::Rules;

/// One version of the team's rules, compiled once from `app.native.core_rules.export`'s JSON.
#[pyclass(frozen, name = "Rules")]
struct PyRules {
    inner: std::sync::Arc<Rules>,
}

#[pymethods]
impl PyRules {
    #[new]
    fn new(export: &str) -> PyResult<Self> {
        Ok(PyRules { inner: std::sync::Arc::new(Rules::from_json(export).map_err(PyValueError::new_err)?) })
    }

    #[getter]
    fn version(&self) -> i64 {
        self.inner.version
    }
}

fn header(d: &Bound<PyDict>, name: &str) -> PyResult<[u8; 5]> {
    let v: Vec<u8> = get(d, name)?;
    v.try_into().map_err(|_| PyValueError::new_err(format!("{name} must be 5 bytes")))
}

fn get<'py, T: FromPyObject<'py>>(d: &Bound<'py, PyDict>, name: &str) -> PyResult<T> {
    d.get_item(name)?.ok_or_else(|| PyValueError::new_err(format!("config lacks {name}")))?.extract()
}

fn config(d: &Bound<PyDict>) -> PyResult<Config> {
    Ok(Config {
        partition: get(d, "partition")?,
        partitions: get(d, "partitions")?,
        output_partitions: get(d, "output_partitions")?,
        now_ms: get(d, "now_ms")?,
        dedup_ttl_ms: get(d, "dedup_ttl_ms")?,
        tombstone_ttl_ms: get(d, "tombstone_ttl_ms")?,
        record_bound: get(d, "record_bound")?,
        limits: Limits {
            max_editors: get(d, "max_editors")?,
            max_recent: get(d, "max_recent")?,
            max_document_bytes: get(d, "max_document_bytes")?,
            dedup_ttl_us: get::<i64>(d, "dedup_ttl_ms")? * 1000,
            max_readers: get(d, "max_readers")?,
            max_id_bytes: get(d, "max_id_bytes")?,
            max_json_depth: get(d, "max_json_depth")?,
        },
        record_keys: get(d, "record_keys")?,
        command_header: header(d, "command_header")?,
        state_header: header(d, "state_header")?,
        event_header: header(d, "event_header")?,
        rejection_header: header(d, "rejection_header")?,
        rules_version: get(d, "rules_version")?,
        rules: match d.get_item("rules")? {
            Some(r) if !r.is_none() => Some(r.downcast::<PyRules>()?.get().inner.clone()),
            _ => None,
        },
    })
}

fn opt_bytes<'a>(v: &'a Bound<PyAny>) -> PyResult<Option<&'a [u8]>> {
    if v.is_none() {
        Ok(None)
    } else {
        Ok(Some(v.downcast::<PyBytes>()?.as_bytes()))
    }
}

/// Decide each key's records: `keys[i]`'s records are `values[starts[i]:starts[i + 1]]` (and their signatures and
/// traceparents), over its stored value `states[i]` (None: none). Returns, per key, either an int (why it goes
/// back to the Python path, `batch::Fallback`) or `(outputs, stored value or None, deleted)`, the outputs being
/// `app.validator.outputs.OutputRecord` tuples in the key's record order.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn decide_batch<'py>(py: Python<'py>, cfg: &Bound<'py, PyDict>, keys: &Bound<'py, PyList>, states: &Bound<'py, PyList>,
                     starts: Vec<usize>, values: &Bound<'py, PyList>, signatures: &Bound<'py, PyList>,
                     traceparents: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let c = config(cfg)?;
    if c.rules.as_ref().map(|r| r.version) != c.rules_version {
        return Err(PyValueError::new_err("rules and rules_version differ"));
    }
    let events: Bound<PyAny> = cfg.get_item("topic_events")?.ok_or_else(|| PyValueError::new_err("topic_events"))?;
    let rejections = cfg.get_item("topic_rejections")?.ok_or_else(|| PyValueError::new_err("topic_rejections"))?;
    let source: Vec<u8> = get(cfg, "ce_source")?;
    let spec = PyTuple::new(py, ["ce_specversion".into_pyobject(py)?.into_any(), PyBytes::new(py, b"1.0").into_any()])?;
    let content = PyTuple::new(py, ["content-type".into_pyobject(py)?.into_any(),
                                    PyBytes::new(py, b"application/avro").into_any()])?;
    let source_pair = PyTuple::new(py, ["ce_source".into_pyobject(py)?.into_any(), PyBytes::new(py, &source).into_any()])?;
    // app.validator.headers: ce_rulesversion (decimal) before content-type, only for decisions under rules
    let rules_pair = match c.rules_version {
        None => None,
        Some(v) => Some(PyTuple::new(py, ["ce_rulesversion".into_pyobject(py)?.into_any(),
                                          PyBytes::new(py, v.to_string().as_bytes()).into_any()])?),
    };
    let n = keys.len();
    if states.len() != n || starts.len() != n + 1 || values.len() != starts[n] || signatures.len() != starts[n]
        || traceparents.len() != starts[n] {
        return Err(PyValueError::new_err("keys, states, starts and records do not line up"));
    }
    let vals: Vec<Bound<PyAny>> = values.iter().collect();
    let sigs: Vec<Bound<PyAny>> = signatures.iter().collect();
    let traced: Vec<bool> = traceparents.iter().map(|t| !t.is_none()).collect();
    let result = PyList::empty(py);
    for i in 0..n {
        let key_obj = keys.get_item(i)?;
        let key = key_obj.downcast::<PyBytes>()?.as_bytes();
        let st_obj = states.get_item(i)?;
        let raw = opt_bytes(&st_obj)?;
        let mut recs = Vec::with_capacity(starts[i + 1] - starts[i]);
        for j in starts[i]..starts[i + 1] {
            recs.push(Record { value: opt_bytes(&vals[j])?, signature: opt_bytes(&sigs[j])?, traced: traced[j] });
        }
        match decide_key(key, raw, &recs, &c) {
            Err(why) => result.append(why as i64)?,
            Ok(d) => {
                let subject = PyTuple::new(py, ["ce_subject".into_pyobject(py)?.into_any(), key_obj.clone()])?;
                let outs = PyList::empty(py);
                for o in &d.outputs {
                    let mut pairs = vec![
                        spec.clone().into_any(),
                        PyTuple::new(py, ["ce_id".into_pyobject(py)?.into_any(),
                                          PyBytes::new(py, o.id.as_bytes()).into_any()])?.into_any(),
                        PyTuple::new(py, ["ce_type".into_pyobject(py)?.into_any(),
                                          PyBytes::new(py, o.ce_type.as_bytes()).into_any()])?.into_any(),
                        source_pair.clone().into_any(),
                        subject.clone().into_any(),
                        PyTuple::new(py, ["ce_time".into_pyobject(py)?.into_any(),
                                          PyBytes::new(py, crate::model::ce_time(o.at).as_bytes()).into_any()])?
                            .into_any(),
                    ];
                    if let Some(r) = &rules_pair {
                        pairs.push(r.clone().into_any());
                    }
                    pairs.push(content.clone().into_any());
                    let headers = PyTuple::new(py, pairs)?;
                    let topic = if o.event { events.clone() } else { rejections.clone() };
                    outs.append(PyTuple::new(py, [topic, key_obj.clone(), PyBytes::new(py, &o.value).into_any(),
                                                  o.partition.into_pyobject(py)?.into_any(), headers.into_any()])?)?;
                }
                let stored = match &d.state_value {
                    Some(v) => PyBytes::new(py, v).into_any(),
                    None => py.None().into_bound(py),
                };
                result.append(PyTuple::new(py, [outs.into_any(), stored,
                                                pyo3::types::PyBool::new(py, d.deleted).to_owned().into_any()])?)?;
            }
        }
    }
    Ok(result)
}

#[pymodule]
fn arbiter_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decide_batch, m)?)?;
    m.add_class::<PyRules>()?;
    m.add("SPEC", crate::SPEC)?;
    Ok(())
}

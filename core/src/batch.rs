//! One key's records of a partition batch, as `app.validator.fold.fold` decides them under the rules in force
//! for the whole batch (or none).
//!
//! Everything a record needs that the core does not implement makes the whole key `Fallback`: the shard
//! server then folds that key in Python, so every output stays the specification's.

use crate::decide::{decide, Limits, Outcome};
use crate::ids::{partition_for, signature_valid};
use crate::model::{self, decode_command, decode_state, State};
use crate::rules::Rules;

pub struct Config {
    pub partition: i64,
    pub partitions: Option<i64>,
    pub output_partitions: Option<i64>,
    pub now_ms: i64,
    pub dedup_ttl_ms: i64,
    pub tombstone_ttl_ms: i64,
    pub record_bound: usize,
    pub limits: Limits,
    /// (key id, secret) of every trusted record key; `None` when unsigned commands are allowed
    pub record_keys: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    pub command_header: [u8; 5],
    pub state_header: [u8; 5],
    pub event_header: [u8; 5],
    pub rejection_header: [u8; 5],
    /// the team's rules version in force for the whole batch (None: no rules)
    pub rules_version: Option<i64>,
    /// that version's rules (`crate::rules`), None when none are in force
    pub rules: Option<std::sync::Arc<Rules>>,
}

/// Why a key went back to the Python path (the shard server counts them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// a record that does not decode into a command (bad signature, bytes, schema, key or partition): parked
    Record = 1,
    /// a payload or value whose answer the core does not compute (see `json`)
    Payload = 2,
    /// a stored state the core does not read (another schema, a tracked text it does not parse)
    State = 3,
    /// an output over the record bound: `TOO_LARGE` by `outputs.too_large`
    TooLarge = 4,
    /// a record with trace context to copy onto its output
    Traced = 5,
    /// (no longer given: typed objects are decided here, `crate::rules`)
    Typed = 6,
    /// a typed object whose type has guards for the command's kind: cel-cpp and the guard budget decide them
    Guards = 7,
    /// a document or patch its type's schema refuses: the message of the first error is jsonschema-rs's
    Schema = 8,
}

pub struct Output {
    pub event: bool,
    pub value: Vec<u8>,
    pub partition: i64,
    pub id: String,
    pub at: i64,
    pub ce_type: &'static str,
}

pub struct Decided {
    pub outputs: Vec<Output>,
    /// the stored value (8-byte write time + state) when a command was accepted
    pub state_value: Option<Vec<u8>>,
    pub deleted: bool,
}

pub struct Record<'a> {
    pub value: Option<&'a [u8]>,
    pub signature: Option<&'a [u8]>,
    pub traced: bool,
}

/// `shard.aged_state` of stored bytes: `Ok(None)` for nothing (or a tombstone past its TTL).
fn load(raw: Option<&[u8]>, cfg: &Config) -> Result<Option<State>, Fallback> {
    let Some(raw) = raw else { return Ok(None) };
    if raw.len() < 13 || raw[8..13] != cfg.state_header {
        return Err(Fallback::State);
    }
    let written = i64::from_be_bytes(raw[..8].try_into().unwrap());
    let mut st = decode_state(&raw[8..]).ok_or(Fallback::State)?;
    let age = cfg.now_ms - written;
    if st.deleted {
        return Ok(if age > cfg.tombstone_ttl_ms { None } else { Some(st) });
    }
    if !st.recent.is_empty() && age > cfg.dedup_ttl_ms {
        st.recent.clear();
    }
    Ok(Some(st))
}

pub fn decide_key(key: &[u8], raw_state: Option<&[u8]>, records: &[Record], cfg: &Config) -> Result<Decided, Fallback> {
    let mut commands = Vec::with_capacity(records.len());
    for r in records {
        if r.traced {
            return Err(Fallback::Traced);
        }
        let value = r.value.ok_or(Fallback::Record)?;
        if let Some(keys) = &cfg.record_keys {
            if !signature_valid(keys, Some(key), value, r.signature.unwrap_or(b"")) {
                return Err(Fallback::Record);
            }
        }
        if value.len() < 5 || value[..5] != cfg.command_header {
            return Err(Fallback::Record);
        }
        let c = decode_command(value).ok_or(Fallback::Record)?;
        if c.object_id.as_bytes() != key {
            return Err(Fallback::Record);
        }
        if let Some(n) = cfg.partitions {
            if partition_for(key, n) != cfg.partition {
                return Err(Fallback::Record);
            }
        }
        commands.push(c);
    }
    let out_partition = match cfg.output_partitions {
        Some(out) if Some(out) != cfg.partitions => partition_for(key, out),
        _ => cfg.partition,
    };
    let mut state = load(raw_state, cfg)?;
    let mut changed = false;
    let mut outputs = Vec::with_capacity(records.len());
    for c in &commands {
        let outcome = decide(state.as_ref(), c, &cfg.limits, cfg.rules.as_deref())?;
        let (value, event, id, ce_type, new_state) = match outcome {
            Outcome::Accepted(ev, st) => {
                let mut v = cfg.event_header.to_vec();
                model::encode_event(&mut v, &ev, c, cfg.rules_version);
                (v, true, ev.event_id, ev.etype.ce_type(), Some(st))
            }
            Outcome::Rejected(rej) => {
                let mut v = cfg.rejection_header.to_vec();
                model::encode_rejection(&mut v, &rej, c, cfg.rules_version);
                (v, false, rej.rejection_id, "arbiter.command.rejected", None)
            }
        };
        if value.len() + key.len() > cfg.record_bound {
            return Err(Fallback::TooLarge);
        }
        if let Some(st) = new_state {
            state = Some(st);
            changed = true;
        }
        outputs.push(Output { event, value, partition: out_partition, id, at: c.issued_at, ce_type });
    }
    let (state_value, deleted) = match (&state, changed) {
        (Some(st), true) => {
            let mut v = cfg.now_ms.to_be_bytes().to_vec();
            v.extend_from_slice(&cfg.state_header);
            model::encode_state(&mut v, st);
            (Some(v), st.deleted)
        }
        _ => (None, false),
    };
    Ok(Decided { outputs, state_value, deleted })
}

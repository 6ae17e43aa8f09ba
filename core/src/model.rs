//! The command, state, event and rejection as the core holds them, and their Avro bodies
//! (`schemas/compiled.py`: command v4, state v3, event v5, rejection v4).

use crate::avro::{self, Reader};
use crate::rules::Verdict;

pub const MIN_MICROS: i64 = -62_135_596_800_000_000; // datetime(1, 1, 1, tzinfo=UTC)
pub const MAX_MICROS: i64 = 253_402_300_799_999_999; // datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Create,
    Update,
    Delete,
    GrantEditor,
    RevokeEditor,
    GrantReader,
    RevokeReader,
}

impl Kind {
    pub fn class_name(self) -> &'static str {
        match self {
            Kind::Create => "CreateObject",
            Kind::Update => "UpdateObject",
            Kind::Delete => "DeleteObject",
            Kind::GrantEditor => "GrantEditor",
            Kind::RevokeEditor => "RevokeEditor",
            Kind::GrantReader => "GrantReader",
            Kind::RevokeReader => "RevokeReader",
        }
    }
}

pub struct Command<'a> {
    pub kind: Kind,
    pub command_id: &'a str,
    pub object_id: &'a str,
    pub principal: &'a str,
    pub issued_at: i64,
    pub expected_version: Option<i64>,
    /// the document (create), patch (update), editor or reader (grants and revokes); "" for delete
    pub payload: &'a str,
    pub groups: Vec<&'a str>,
    pub issuer: Option<&'a str>,
    pub jti: Option<&'a str>,
    /// the type a create names (the team's rules, `crate::rules`); None for every other kind
    pub object_type: Option<&'a str>,
}

/// Decode a command v4 body (after the 5-byte header); `None` for anything the core does not decide.
pub fn decode_command(data: &[u8]) -> Option<Command<'_>> {
    let mut r = Reader::new(data, 5);
    let b = r.byte()?;
    if b & 1 != 0 || b >> 1 >= 7 {
        return None;
    }
    let kind = [Kind::Create, Kind::Update, Kind::Delete, Kind::GrantEditor, Kind::RevokeEditor, Kind::GrantReader,
                Kind::RevokeReader][(b >> 1) as usize];
    let command_id = r.string()?;
    let object_id = r.string()?;
    let principal = r.string()?;
    let issued_at = r.long()?;
    let expected_version = r.opt_long()?;
    let document = r.opt_string()?;
    let patch = r.opt_string()?;
    let editor = r.opt_string()?;
    let reader = r.opt_string()?;
    let groups = r.strings()?;
    let issuer = r.opt_string()?;
    let jti = r.opt_string()?;
    let object_type = r.opt_string()?;
    if !r.at_end() || !(MIN_MICROS..=MAX_MICROS).contains(&issued_at) {
        return None;
    }
    let payload = match kind {
        Kind::Create => document?,
        Kind::Update => patch?,
        Kind::Delete => "",
        Kind::GrantEditor | Kind::RevokeEditor => editor?,
        Kind::GrantReader | Kind::RevokeReader => reader?,
    };
    let object_type = if kind == Kind::Create { object_type } else { None };
    Some(Command { kind, command_id, object_id, principal, issued_at, expected_version, payload, groups, issuer, jti,
                   object_type })
}

#[derive(Clone, Debug, PartialEq)]
pub struct Recent {
    pub command_id: String,
    pub outcome: String,
    pub version: i64,
    pub at: i64,
    /// "" stands for None (state v1), as in the stored bytes
    pub principal: String,
    /// 0 stands for None
    pub fingerprint: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct State {
    pub exists: bool,
    pub deleted: bool,
    pub version: i64,
    pub owner: String,
    pub editors: Vec<String>,
    pub created_at: Option<i64>,
    pub updated_at: Option<i64>,
    pub deleted_at: Option<i64>,
    pub document_size: i64,
    pub recent: Vec<Recent>,
    pub readers: Vec<String>,
    pub object_type: Option<String>,
    /// the canonical JSON text of the tracked fields (`commands.rules.tracked`)
    pub tracked: Option<String>,
}

fn in_range(v: Option<i64>) -> bool {
    v.is_none_or(|v| (MIN_MICROS..=MAX_MICROS).contains(&v))
}

/// Decode a state v3 body; `None` for anything odd.
pub fn decode_state(data: &[u8]) -> Option<State> {
    let mut r = Reader::new(data, 5);
    let exists = r.boolean()?;
    let deleted = r.boolean()?;
    let version = r.long()?;
    let owner = r.string()?.to_owned();
    let editors: Vec<String> = r.strings()?.into_iter().map(str::to_owned).collect();
    let created_at = r.opt_long()?;
    let updated_at = r.opt_long()?;
    let deleted_at = r.opt_long()?;
    let document_size = r.long()?;
    let ids = r.strings()?;
    let outcomes = r.strings()?;
    let versions = r.longs()?;
    let ats = r.longs()?;
    let readers: Vec<String> = r.strings()?.into_iter().map(str::to_owned).collect();
    let principals = r.strings()?;
    let prints = r.raw()?;
    let object_type = r.opt_string()?;
    let tracked = r.opt_string()?;
    let n = ids.len();
    if !r.at_end() || outcomes.len() != n || versions.len() != n
        || ats.len() != n || !(principals.is_empty() || principals.len() == n)
        || !(prints.is_empty() || prints.len() == 8 * n)
        || ![created_at, updated_at, deleted_at].into_iter().all(in_range)
        || !ats.iter().all(|&a| in_range(Some(a))) {
        return None;
    }
    let recent = (0..n)
        .map(|i| Recent {
            command_id: ids[i].to_owned(),
            outcome: outcomes[i].to_owned(),
            version: versions[i],
            at: ats[i],
            principal: principals.get(i).map(|p| p.to_string()).unwrap_or_default(),
            fingerprint: if prints.is_empty() {
                0
            } else {
                i64::from_be_bytes(prints[8 * i..8 * i + 8].try_into().unwrap())
            },
        })
        .collect();
    Some(State { exists, deleted, version, owner, editors, created_at, updated_at, deleted_at, document_size, recent,
                 readers, object_type: object_type.map(str::to_owned), tracked: tracked.map(str::to_owned) })
}

pub fn encode_state(out: &mut Vec<u8>, st: &State) {
    out.push(st.exists as u8);
    out.push(st.deleted as u8);
    avro::write_long(out, st.version);
    avro::write_string(out, &st.owner);
    avro::write_strings(out, &st.editors);
    avro::write_opt_long(out, st.created_at);
    avro::write_opt_long(out, st.updated_at);
    avro::write_opt_long(out, st.deleted_at);
    avro::write_long(out, st.document_size);
    let ids: Vec<&str> = st.recent.iter().map(|r| r.command_id.as_str()).collect();
    avro::write_strings(out, &ids);
    let outcomes: Vec<&str> = st.recent.iter().map(|r| r.outcome.as_str()).collect();
    avro::write_strings(out, &outcomes);
    avro::write_longs(out, &st.recent.iter().map(|r| r.version).collect::<Vec<_>>());
    avro::write_longs(out, &st.recent.iter().map(|r| r.at).collect::<Vec<_>>());
    avro::write_strings(out, &st.readers);
    let who: Vec<&str> = st.recent.iter().map(|r| r.principal.as_str()).collect();
    avro::write_strings(out, &who);
    let prints: Vec<u8> = st.recent.iter().flat_map(|r| r.fingerprint.to_be_bytes()).collect();
    avro::write_bytes(out, &prints);
    avro::write_opt_string(out, st.object_type.as_deref());
    avro::write_opt_string(out, st.tracked.as_deref());
}

/// `EventType`'s declaration order, which is the Avro enum's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EventType {
    Created,
    Updated,
    Deleted,
    EditorGranted,
    EditorRevoked,
    ReaderGranted,
    ReaderRevoked,
}

impl EventType {
    pub fn ce_type(self) -> &'static str {
        match self {
            EventType::Created => "arbiter.object.created",
            EventType::Updated => "arbiter.object.updated",
            EventType::Deleted => "arbiter.object.deleted",
            EventType::EditorGranted => "arbiter.object.editor_granted",
            EventType::EditorRevoked => "arbiter.object.editor_revoked",
            EventType::ReaderGranted => "arbiter.object.reader_granted",
            EventType::ReaderRevoked => "arbiter.object.reader_revoked",
        }
    }
}

/// `ReasonCode`'s declaration order, which is the Avro enum's (only the generic reasons are listed).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reason {
    AlreadyExists = 0,
    NotFound = 1,
    Deleted = 2,
    VersionConflict = 3,
    Forbidden = 4,
    Duplicate = 5,
    TooLarge = 6,
    Malformed = 7,
    IdempotencyKeyReused = 10,
    RuleViolated = 12,
    RuleError = 13,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::AlreadyExists => "ALREADY_EXISTS",
            Reason::NotFound => "NOT_FOUND",
            Reason::Deleted => "DELETED",
            Reason::VersionConflict => "VERSION_CONFLICT",
            Reason::Forbidden => "FORBIDDEN",
            Reason::Duplicate => "DUPLICATE",
            Reason::TooLarge => "TOO_LARGE",
            Reason::Malformed => "MALFORMED",
            Reason::IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
            Reason::RuleViolated => "RULE_VIOLATED",
            Reason::RuleError => "RULE_ERROR",
        }
    }
}

pub struct Event<'a> {
    pub event_id: String,
    pub etype: EventType,
    pub version: i64,
    pub owner: String,
    pub document: Option<&'a str>,
    pub patch: Option<&'a str>,
    pub editor: Option<&'a str>,
    pub reader: Option<&'a str>,
    pub object_type: Option<String>,
    /// rules in warn or audit mode that would have refused the command (event v5)
    pub warnings: Vec<Verdict>,
}

pub struct Rejection {
    pub rejection_id: String,
    pub reason: Reason,
    pub message: String,
    pub current_version: i64,
    pub original: Option<(String, i64)>,
    /// the rule that refused it: (its qualified name, its message, its pointers)
    pub rule: Option<(String, String, Vec<String>)>,
}

pub fn encode_event(out: &mut Vec<u8>, ev: &Event, c: &Command, rules_version: Option<i64>) {
    avro::write_string(out, &ev.event_id);
    out.push((ev.etype as u8) << 1);
    avro::write_string(out, c.object_id);
    avro::write_long(out, ev.version);
    avro::write_string(out, c.command_id);
    avro::write_string(out, c.principal);
    avro::write_long(out, c.issued_at);
    avro::write_string(out, &ev.owner);
    avro::write_opt_string(out, ev.document);
    avro::write_opt_string(out, ev.patch);
    avro::write_opt_string(out, ev.editor);
    avro::write_opt_string(out, ev.reader);
    avro::write_opt_string(out, c.issuer);
    avro::write_opt_string(out, c.jti);
    avro::write_opt_string(out, ev.object_type.as_deref());
    avro::write_opt_long(out, rules_version);
    if !ev.warnings.is_empty() {
        avro::write_long(out, ev.warnings.len() as i64);
        for w in &ev.warnings {
            avro::write_string(out, &w.rule);
            avro::write_string(out, &w.mode);
            avro::write_string(out, w.reason.name());
            avro::write_string(out, &w.message);
            avro::write_strings(out, &w.pointers);
        }
    }
    out.push(0); // the end of the warnings array (or an empty one)
}

pub fn encode_rejection(out: &mut Vec<u8>, rej: &Rejection, c: &Command, rules_version: Option<i64>) {
    avro::write_string(out, &rej.rejection_id);
    out.push((rej.reason as u8) << 1);
    avro::write_string(out, &rej.message);
    avro::write_opt_string(out, Some(c.command_id));
    avro::write_opt_string(out, Some(c.object_id));
    avro::write_opt_string(out, Some(c.principal));
    avro::write_opt_long(out, Some(c.issued_at));
    avro::write_opt_long(out, Some(rej.current_version));
    avro::write_opt_string(out, rej.original.as_ref().map(|o| o.0.as_str()));
    avro::write_opt_long(out, rej.original.as_ref().map(|o| o.1));
    out.push(0); // original record: only for records that never decoded (the Python path)
    avro::write_opt_string(out, c.issuer);
    avro::write_opt_string(out, c.jti);
    avro::write_opt_long(out, rules_version); // decide() names the rules version on every rejection under rules
    match &rej.rule {
        None => out.extend_from_slice(&[0, 0, 0]), // rule, rule_message, rule_pointers: none
        Some((rule, message, pointers)) => {
            avro::write_opt_string(out, Some(rule));
            avro::write_opt_string(out, Some(message));
            avro::write_strings(out, pointers);
        }
    }
}

/// `app.validator.headers.ce_time`: RFC 3339 in UTC with microseconds and a Z.
pub fn ce_time(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let us = micros.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", y, m, d, sod / 3600, sod % 3600 / 60, sod % 60, us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ce_time_formats() {
        assert_eq!(ce_time(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(ce_time(1_735_787_045_000_006), "2025-01-02T03:04:05.000006Z");
        assert_eq!(ce_time(MIN_MICROS), "0001-01-01T00:00:00.000000Z");
        assert_eq!(ce_time(MAX_MICROS), "9999-12-31T23:59:59.999999Z");
        assert_eq!(ce_time(-1), "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn state_round_trips() {
        let st = State { exists: true, deleted: false, version: 3, owner: "a".into(), editors: vec!["b".into()],
                         created_at: Some(1), updated_at: Some(2), deleted_at: None, document_size: 10,
                         recent: vec![Recent { command_id: "c".into(), outcome: "ACCEPTED".into(), version: 3,
                                               at: 2, principal: "a".into(), fingerprint: -5 }],
                         readers: vec![], object_type: Some("order".into()), tracked: Some("{}".into()) };
        let mut out = vec![0, 0, 0, 0, 9];
        encode_state(&mut out, &st);
        assert_eq!(decode_state(&out), Some(st));
    }
}

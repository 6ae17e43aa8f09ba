//! `commands.decide`: the same checks, order and messages; typed objects under the team's rules through
//! `crate::rules` (without guards: a kind with guards is the Python path's, `Fallback::Guards`).

use crate::batch::Fallback;
use crate::ids::{command_rejection_id, event_id, fingerprint};
use crate::json::{object_problem, Unsure};
use crate::model::{Command, Event, EventType, Kind, Reason, Recent, Rejection, State};
use crate::rules::{clip_bytes, watched_rules, Rules, Verdict, MAX_RULE_BYTES, MAX_WARNINGS};

pub struct Limits {
    pub max_editors: usize,
    pub max_recent: usize,
    pub max_document_bytes: i64,
    pub dedup_ttl_us: i64,
    pub max_readers: usize,
    pub max_id_bytes: usize,
    pub max_json_depth: usize,
}

pub enum Outcome<'a> {
    Accepted(Event<'a>, State),
    Rejected(Rejection),
}

/// `commands.rejection.clip`: at most `limit` characters, then an ellipsis.
pub fn clip(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        None => text.to_string(),
        Some((i, _)) => format!("{}…", &text[..i]),
    }
}

fn c200(text: &str) -> String {
    clip(text, 200)
}

fn reject(state: Option<&State>, c: &Command, reason: Reason, message: String) -> Outcome<'static> {
    let version = state.map_or(0, |s| s.version);
    reject_at(c, reason, message, version, None)
}

fn reject_at(c: &Command, reason: Reason, message: String, version: i64, original: Option<(String, i64)>)
    -> Outcome<'static> {
    Outcome::Rejected(Rejection {
        rejection_id: command_rejection_id(c.command_id, c.object_id, version, reason.name(), c.principal),
        reason,
        message,
        current_version: version,
        original,
        rule: None,
    })
}

/// `decide._rule_reject`.
fn rule_reject(state: Option<&State>, c: &Command, v: Verdict) -> Outcome<'static> {
    let version = state.map_or(0, |s| s.version);
    let rule = clip_bytes(&v.rule, MAX_RULE_BYTES);
    Outcome::Rejected(Rejection {
        rejection_id: command_rejection_id(c.command_id, c.object_id, version, v.reason.name(), c.principal),
        reason: v.reason,
        message: clip(&format!("rule {rule}: {}", v.message), 1000),
        current_version: version,
        original: None,
        rule: Some((rule, v.message, v.pointers)),
    })
}

fn holds(principal: &str, groups: &[&str], grantees: &[String]) -> bool {
    grantees.iter().any(|g| g == principal)
        || (!groups.is_empty() && !grantees.is_empty()
            && groups.iter().any(|g| grantees.iter().any(|x| x.strip_prefix("group:") == Some(g))))
}

fn may_read(c: &Command, st: &State) -> bool {
    c.principal == st.owner || holds(c.principal, &c.groups, &st.editors) || holds(c.principal, &c.groups, &st.readers)
}

fn fp(c: &Command) -> i64 {
    match c.object_type {
        // the type is part of what a create asks for (commands.command.fingerprint)
        Some(t) => fingerprint(c.kind.class_name(), c.object_id, c.expected_version, &format!("{t}\0{}", c.payload)),
        None => fingerprint(c.kind.class_name(), c.object_id, c.expected_version, c.payload),
    }
}

/// `commands.rules.bounds.type_name_problem`.
fn type_name_problem(name: &str) -> Option<String> {
    let b = name.as_bytes();
    let ok = !b.is_empty() && b.len() <= 64 && b[0].is_ascii_alphabetic()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
    if ok {
        None
    } else {
        Some("object_type must be an ASCII letter followed by letters, digits, '_', '-' or '.', at most 64 \
              characters".into())
    }
}

fn ids_problem(c: &Command, limits: &Limits) -> Option<String> {
    if c.command_id.is_empty() || c.object_id.is_empty() || c.principal.is_empty() {
        return Some("command_id, object_id and principal must not be empty".into());
    }
    let bound = limits.max_id_bytes;
    for (name, value) in [("command_id", c.command_id), ("object_id", c.object_id), ("principal", c.principal)] {
        if value.len() > bound {
            return Some(format!("{name} is {} bytes, over the limit of {bound}", value.len()));
        }
    }
    for (name, value) in [("object_id", c.object_id), ("principal", c.principal)] {
        if value.contains('\0') {
            return Some(format!("{name} holds U+0000, which PostgreSQL cannot store"));
        }
    }
    // `commands.ids.reserved`: the namespace of Arbiter's own records' keys.
    if c.object_id.starts_with(RESERVED_PREFIX) {
        return Some(format!("object ids starting '{RESERVED_PREFIX}' are reserved for Arbiter's own records"));
    }
    None
}

/// `commands.ids.RESERVED_PREFIX`.
const RESERVED_PREFIX: &str = "arbiter:";

fn dedup(st: &State, c: &Command, limits: &Limits) -> Option<Outcome<'static>> {
    let seen = st.recent.iter().find(|e| {
        e.command_id == c.command_id && (e.principal.is_empty() || e.principal == c.principal)
            && c.issued_at - e.at <= limits.dedup_ttl_us
    })?;
    if seen.fingerprint != 0 && seen.fingerprint != fp(c) {
        return Some(reject(Some(st), c, Reason::IdempotencyKeyReused, format!(
            "idempotency key {} was already used for a different request (accepted at version {}); use a new key \
             for a new request", c200(c.command_id), seen.version)));
    }
    Some(reject_at(c, Reason::Duplicate, format!("command {} was already decided: {} at version {}",
                                                 c200(c.command_id), seen.outcome, seen.version),
                   st.version, Some((seen.outcome.clone(), seen.version))))
}

fn check_payload(c: &Command, limits: &Limits) -> Result<Option<(Reason, String)>, Unsure> {
    let size = match c.kind {
        Kind::Create | Kind::Update => c.payload.len() as i64,
        _ => 0,
    };
    if size > limits.max_document_bytes {
        return Ok(Some((Reason::TooLarge, format!("payload is {size} bytes, over the limit of {}",
                                                  limits.max_document_bytes))));
    }
    if let Some(t) = c.object_type {
        if let Some(p) = type_name_problem(t) {
            return Ok(Some((Reason::Malformed, p)));
        }
    }
    match c.kind {
        Kind::Create => Ok(object_problem(c.payload, limits.max_json_depth)?
            .map(|p| (Reason::Malformed, format!("document must be the JSON text of an object: {p}")))),
        Kind::Update => Ok(object_problem(c.payload, limits.max_json_depth)?.map(|p| {
            (Reason::Malformed, format!("patch must be the JSON text of an object (RFC 7386 merge patch): {p}"))
        })),
        Kind::Delete => Ok(None),
        _ => {
            let g = c.payload;
            if g.is_empty() {
                Ok(Some((Reason::Malformed, "editor or reader must not be empty".into())))
            } else if g.len() > limits.max_id_bytes {
                Ok(Some((Reason::Malformed, format!("editor or reader is over {} bytes", limits.max_id_bytes))))
            } else if g.contains('\0') {
                Ok(Some((Reason::Malformed, "editor or reader holds U+0000, which PostgreSQL cannot store".into())))
            } else {
                Ok(None)
            }
        }
    }
}

fn remember(recent: &[Recent], entry: Recent, limits: &Limits) -> Vec<Recent> {
    let cutoff = entry.at - limits.dedup_ttl_us;
    let mut kept: Vec<Recent> = if cutoff < crate::model::MIN_MICROS {
        recent.to_vec() // before datetime.min + ttl: nothing can be older than ttl
    } else {
        recent.iter().filter(|r| r.at >= cutoff).cloned().collect()
    };
    kept.push(entry);
    if kept.len() > limits.max_recent {
        kept.drain(..kept.len() - limits.max_recent);
    }
    kept
}

/// What `_accept` keeps of the object besides its roles: its type and tracked text.
struct Kept {
    object_type: Option<String>,
    tracked: Option<String>,
}

#[allow(clippy::too_many_arguments)]
fn accept<'a>(state: Option<&State>, c: &Command<'a>, etype: EventType, limits: &Limits, rules: Option<&Rules>,
              kept: Kept, owner: String, editors: Vec<String>, readers: Vec<String>, document_size: i64,
              deleted: bool) -> Result<Outcome<'a>, Fallback> {
    let Kept { object_type, mut tracked } = kept;
    let mut warnings = Vec::new();
    if let Some(t) = &object_type {
        if rules.is_some() || etype == EventType::Created {
            let (verdict, text, watched) = watched_rules(rules, state, c, t)?;
            if let Some(v) = verdict {
                return Ok(rule_reject(state, c, v));
            }
            tracked = text;
            warnings = watched.into_iter().take(MAX_WARNINGS)
                .map(|w| Verdict { rule: clip_bytes(&w.rule, MAX_RULE_BYTES), ..w }).collect();
        }
    }
    let at = c.issued_at;
    let version = state.map_or(1, |s| s.version + 1);
    let entry = Recent { command_id: c.command_id.to_owned(), outcome: "ACCEPTED".into(), version, at,
                         principal: c.principal.to_owned(), fingerprint: fp(c) };
    let new_state = State {
        exists: true,
        deleted,
        version,
        owner: owner.clone(),
        editors,
        created_at: match state { Some(s) => s.created_at, None => Some(at) },
        updated_at: Some(at),
        deleted_at: if deleted { Some(at) } else { None },
        document_size,
        recent: remember(state.map_or(&[][..], |s| &s.recent), entry, limits),
        readers,
        object_type: object_type.clone(),
        tracked,
    };
    let p = Some(c.payload);
    let event = Event {
        event_id: event_id(c.object_id, version),
        etype,
        version,
        owner,
        document: if etype == EventType::Created { p } else { None },
        patch: if etype == EventType::Updated { p } else { None },
        editor: if matches!(etype, EventType::EditorGranted | EventType::EditorRevoked) { p } else { None },
        reader: if matches!(etype, EventType::ReaderGranted | EventType::ReaderRevoked) { p } else { None },
        object_type,
        warnings,
    };
    Ok(Outcome::Accepted(event, new_state))
}

impl From<Unsure> for Fallback {
    fn from(_: Unsure) -> Fallback {
        Fallback::Payload
    }
}

/// `commands.decide(state, command, limits, rules)`: `Err` where the Python path must decide, and why.
pub fn decide<'a>(state: Option<&State>, c: &Command<'a>, limits: &Limits, rules: Option<&Rules>)
    -> Result<Outcome<'a>, Fallback> {
    if state.is_some_and(|s| s.version == i64::MAX) {
        return Err(Fallback::Payload);
    }
    if let Some(p) = ids_problem(c, limits) {
        return Ok(reject(state, c, Reason::Malformed, p));
    }
    if c.kind == Kind::Create {
        if let Some(st) = state {
            if let Some(d) = dedup(st, c, limits) {
                return Ok(d);
            }
            if !may_read(c, st) {
                return Ok(reject_at(c, Reason::AlreadyExists, format!("object {} exists", c200(c.object_id)), 0,
                                    None));
            }
            if st.deleted {
                return Ok(reject(state, c, Reason::Deleted,
                                 format!("object {} was deleted; ids are not reused", c200(c.object_id))));
            }
            if st.exists {
                return Ok(reject(state, c, Reason::AlreadyExists, format!("object {} exists", c200(c.object_id))));
            }
        }
        if let Some(ev) = c.expected_version.filter(|&v| v != 0) {
            return Ok(reject(state, c, Reason::VersionConflict,
                             format!("expected version {ev}, object does not exist (version 0)")));
        }
        if let Some((reason, message)) = check_payload(c, limits)? {
            return Ok(reject(state, c, reason, message));
        }
        let kept = Kept { object_type: c.object_type.map(str::to_owned), tracked: None };
        return accept(state, c, EventType::Created, limits, rules, kept, c.principal.to_owned(), vec![], vec![],
                      c.payload.len() as i64, false);
    }
    let st = match state {
        Some(s) if s.exists || s.deleted => s,
        _ => return Ok(reject_at(c, Reason::NotFound, format!("object {} does not exist", c200(c.object_id)), 0,
                                 None)),
    };
    if !may_read(c, st) {
        return Ok(reject_at(c, Reason::NotFound, format!("object {} does not exist", c200(c.object_id)), 0, None));
    }
    if c.kind == Kind::Update {
        if !(c.principal == st.owner || holds(c.principal, &c.groups, &st.editors)) {
            return Ok(reject(state, c, Reason::Forbidden, "only the owner or an editor may do this".into()));
        }
    } else if c.principal != st.owner {
        return Ok(reject(state, c, Reason::Forbidden, "only the owner may do this".into()));
    }
    if let Some(d) = dedup(st, c, limits) {
        return Ok(d);
    }
    if st.deleted {
        return Ok(reject(state, c, Reason::Deleted, format!("object {} was deleted", c200(c.object_id))));
    }
    if let Some(ev) = c.expected_version.filter(|&v| v != st.version) {
        return Ok(reject(state, c, Reason::VersionConflict,
                         format!("expected version {ev}, current is {}", st.version)));
    }
    if let Some((reason, message)) = check_payload(c, limits)? {
        return Ok(reject(state, c, reason, message));
    }
    let (owner, editors, readers, size) = (st.owner.clone(), &st.editors, &st.readers, st.document_size);
    let g = c.payload;
    // a change keeps the type; only a rule-checked update moves tracked
    let kept = || Kept { object_type: st.object_type.clone(), tracked: st.tracked.clone() };
    let accept = |etype, owner, editors, readers, deleted| {
        accept(state, c, etype, limits, rules, kept(), owner, editors, readers, size, deleted)
    };
    match c.kind {
        Kind::Create => unreachable!("decided above"),
        Kind::Update => accept(EventType::Updated, owner, editors.clone(), readers.clone(), false),
        Kind::Delete => accept(EventType::Deleted, owner, editors.clone(), readers.clone(), true),
        Kind::GrantEditor => {
            if g == owner || editors.iter().any(|e| e == g) {
                Ok(reject(state, c, Reason::AlreadyExists, format!("{} may already edit", c200(g))))
            } else if editors.len() >= limits.max_editors {
                Ok(reject(state, c, Reason::TooLarge,
                          format!("object already has the maximum of {} editors", limits.max_editors)))
            } else {
                let mut e = editors.clone();
                e.push(g.to_owned());
                accept(EventType::EditorGranted, owner, e, readers.clone(), false)
            }
        }
        Kind::RevokeEditor => {
            if !editors.iter().any(|e| e == g) {
                Ok(reject(state, c, Reason::NotFound, format!("{} is not an editor", c200(g))))
            } else {
                let e = editors.iter().filter(|e| *e != g).cloned().collect();
                accept(EventType::EditorRevoked, owner, e, readers.clone(), false)
            }
        }
        Kind::GrantReader => {
            if g == owner || readers.iter().any(|r| r == g) {
                Ok(reject(state, c, Reason::AlreadyExists, format!("{} may already read", c200(g))))
            } else if readers.len() >= limits.max_readers {
                Ok(reject(state, c, Reason::TooLarge,
                          format!("object already has the maximum of {} readers", limits.max_readers)))
            } else {
                let mut r = readers.clone();
                r.push(g.to_owned());
                accept(EventType::ReaderGranted, owner, editors.clone(), r, false)
            }
        }
        Kind::RevokeReader => {
            if !readers.iter().any(|r| r == g) {
                Ok(reject(state, c, Reason::NotFound, format!("{} is not a reader", c200(g))))
            } else {
                let r = readers.iter().filter(|r| *r != g).cloned().collect();
                accept(EventType::ReaderRevoked, owner, editors.clone(), r, false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_counts_characters() {
        assert_eq!(clip("abc", 2), "ab…");
        assert_eq!(clip("ééé", 3), "ééé");
        assert_eq!(clip("éééé", 3), "ééé…");
    }
}

//! `commands.decide` for untyped objects with no rules in force: the same checks, order and messages.

use crate::ids::{command_rejection_id, event_id, fingerprint};
use crate::json::{object_problem, Unsure};
use crate::model::{Command, Event, EventType, Kind, Reason, Recent, Rejection, State};

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
    fingerprint(c.kind.class_name(), c.object_id, c.expected_version, c.payload)
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

#[allow(clippy::too_many_arguments)]
fn accept<'a>(state: Option<&State>, c: &Command<'a>, etype: EventType, limits: &Limits, owner: String,
              editors: Vec<String>, readers: Vec<String>, document_size: i64, deleted: bool) -> Outcome<'a> {
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
    };
    Outcome::Accepted(event, new_state)
}

/// `commands.decide(state, command, limits)` with no rules: `Err(Unsure)` where the Python path must decide.
pub fn decide<'a>(state: Option<&State>, c: &Command<'a>, limits: &Limits) -> Result<Outcome<'a>, Unsure> {
    if state.is_some_and(|s| s.version == i64::MAX) {
        return Err(Unsure);
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
        return Ok(accept(state, c, EventType::Created, limits, c.principal.to_owned(), vec![], vec![],
                         c.payload.len() as i64, false));
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
    Ok(match c.kind {
        Kind::Create => unreachable!("decided above"),
        Kind::Update => accept(state, c, EventType::Updated, limits, owner, editors.clone(), readers.clone(), size,
                               false),
        Kind::Delete => accept(state, c, EventType::Deleted, limits, owner, editors.clone(), readers.clone(), size,
                               true),
        Kind::GrantEditor => {
            if g == owner || editors.iter().any(|e| e == g) {
                reject(state, c, Reason::AlreadyExists, format!("{} may already edit", c200(g)))
            } else if editors.len() >= limits.max_editors {
                reject(state, c, Reason::TooLarge,
                       format!("object already has the maximum of {} editors", limits.max_editors))
            } else {
                let mut e = editors.clone();
                e.push(g.to_owned());
                accept(state, c, EventType::EditorGranted, limits, owner, e, readers.clone(), size, false)
            }
        }
        Kind::RevokeEditor => {
            if !editors.iter().any(|e| e == g) {
                reject(state, c, Reason::NotFound, format!("{} is not an editor", c200(g)))
            } else {
                let e = editors.iter().filter(|e| *e != g).cloned().collect();
                accept(state, c, EventType::EditorRevoked, limits, owner, e, readers.clone(), size, false)
            }
        }
        Kind::GrantReader => {
            if g == owner || readers.iter().any(|r| r == g) {
                reject(state, c, Reason::AlreadyExists, format!("{} may already read", c200(g)))
            } else if readers.len() >= limits.max_readers {
                reject(state, c, Reason::TooLarge,
                       format!("object already has the maximum of {} readers", limits.max_readers))
            } else {
                let mut r = readers.clone();
                r.push(g.to_owned());
                accept(state, c, EventType::ReaderGranted, limits, owner, editors.clone(), r, size, false)
            }
        }
        Kind::RevokeReader => {
            if !readers.iter().any(|r| r == g) {
                reject(state, c, Reason::NotFound, format!("{} is not a reader", c200(g)))
            } else {
                let r = readers.iter().filter(|r| *r != g).cloned().collect();
                accept(state, c, EventType::ReaderRevoked, limits, owner, editors.clone(), r, size, false)
            }
        }
    })
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

//! The team's rules for typed objects: `commands.rules.evaluate.watched_rules` without guards, the same order,
//! messages and pointers.
//!
//! The rules are the compiled `RuleSet` the Python side builds, exported as JSON (`app.native.core_rules`): per
//! type its two schemas (Draft 2020-12, compiled here by the `jsonschema` crate with the `regex` engine, as
//! `commands.rules.ruleset._compile_schema` compiles them with jsonschema-rs), tracked fields, bound, transitions,
//! the schemas' mode and the command kinds that have guards. What this port does not decide goes back to the
//! Python path for the whole key: a kind with guards (cel-cpp and the guard budget decide them), a document or
//! patch a schema refuses where the first error's message could read otherwise than jsonschema-rs writes it over
//! Python values (a float in the instance or the schema, a string beyond printable ASCII or with `"`, `\`, `~`
//! or `/`), a stored tracked text it does not read.

use std::collections::{HashMap, HashSet};

use jsonschema::{PatternOptions, Validator};
use serde_json::{Map, Value};

use crate::batch::Fallback;
use crate::model::{Command, Kind, Reason, State};
use crate::pyjson::{canonical, parse, patched_value, same, value_at};

/// `commands.rules.bounds`.
pub const MAX_MESSAGE_BYTES: usize = 1024;
pub const MAX_POINTERS: usize = 16;
pub const MAX_POINTER_BYTES: usize = 256;
pub const MAX_WARNINGS: usize = 4;
pub const MAX_RULE_BYTES: usize = 129;
const ENFORCE: &str = "enforce";

pub struct Transition {
    rule: String,
    field: String,
    pointer: String,
    initial: Option<HashSet<String>>,
    allowed: HashMap<String, HashSet<String>>,
    message: Option<String>,
    mode: String,
}

pub struct Tracked {
    pointer: String,
    tokens: Vec<String>,
}

/// A compiled schema and whether its text holds a float (a message quoting it is then the Python path's).
pub struct Schema {
    validator: Validator,
    floats: bool,
}

pub struct TypeRules {
    name: String,
    create_schema: Option<Schema>,
    patch_schema: Option<Schema>,
    schema_mode: String,
    tracked: Vec<Tracked>,
    pointers: HashSet<String>,
    first_tokens: HashSet<String>,
    max_tracked_bytes: usize,
    transitions: Vec<Transition>,
    guard_kinds: HashSet<String>,
}

pub struct Rules {
    pub version: i64,
    types: HashMap<String, TypeRules>,
}

/// A rule refused (or, in warn or audit mode, would have refused) the command.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub reason: Reason,
    pub rule: String,
    pub message: String,
    pub pointers: Vec<String>,
    pub mode: String,
}

fn field<'a>(v: &'a Value, name: &str) -> Result<&'a Value, String> {
    v.get(name).ok_or_else(|| format!("rules export lacks {name}"))
}

fn text(v: &Value, name: &str) -> Result<String, String> {
    field(v, name)?.as_str().map(str::to_owned).ok_or_else(|| format!("{name} is not a string"))
}

fn strings(v: &Value) -> Result<Vec<String>, String> {
    v.as_array().ok_or("not a list")?.iter()
        .map(|s| s.as_str().map(str::to_owned).ok_or_else(|| "not a string".to_string())).collect()
}

fn schema(v: &Value) -> Result<Option<Schema>, String> {
    if v.is_null() {
        return Ok(None);
    }
    let validator = jsonschema::draft202012::options().with_pattern_options(PatternOptions::regex()).build(v)
        .map_err(|e| format!("schema does not compile: {e}"))?;
    Ok(Some(Schema { validator, floats: !plain(v) }))
}

/// Whether every number in `v` is an integer and every string (and member name) printable ASCII without `"`, `\`,
/// `~` or `/`: then an error message quoting any part of it reads the same from Python values.
fn plain(v: &Value) -> bool {
    let text = |s: &str| s.bytes().all(|c| (0x20..0x7f).contains(&c) && !matches!(c, b'"' | b'\\' | b'~' | b'/'));
    match v {
        Value::Number(n) => !n.is_f64(),
        Value::String(s) => text(s),
        Value::Array(a) => a.iter().all(plain),
        Value::Object(m) => m.iter().all(|(k, x)| text(k) && plain(x)),
        _ => true,
    }
}

/// `evaluate._schema_verdict` for an instance `schema` refuses, or `Fallback::Schema` where its message might not
/// be jsonschema-rs's over Python values.
fn schema_verdict(schema: &Schema, value: &Value, name: &str, what: &str) -> Result<Verdict, Fallback> {
    if schema.floats || !plain(value) {
        return Err(Fallback::Schema);
    }
    let error = schema.validator.iter_errors(value).next().ok_or(Fallback::Schema)?;
    let at = error.instance_path().to_string();
    let at = if at.is_empty() { "/".to_string() } else { at };
    let rule = format!("{name}:{}", if what == "document" { "create_schema" } else { "patch_schema" });
    Ok(violated(&rule, &format!("{what} does not match the schema at {at}: {error}"), &[at.clone()],
                Reason::RuleViolated))
}

impl Rules {
    /// Read the export of `app.native.core_rules.export`.
    pub fn from_json(text_: &str) -> Result<Rules, String> {
        let v: Value = serde_json::from_str(text_).map_err(|e| e.to_string())?;
        let version = field(&v, "version")?.as_i64().ok_or("version")?;
        let mut types = HashMap::new();
        for (name, t) in field(&v, "types")?.as_object().ok_or("types")? {
            let mut tracked = Vec::new();
            for row in field(t, "tracked")?.as_array().ok_or("tracked")? {
                let pointer = row.get(1).and_then(Value::as_str).ok_or("tracked pointer")?.to_owned();
                let tokens = strings(row.get(2).ok_or("tracked tokens")?)?;
                tracked.push(Tracked { pointer, tokens });
            }
            let mut transitions = Vec::new();
            for x in field(t, "transitions")?.as_array().ok_or("transitions")? {
                let initial = match field(x, "initial")? {
                    Value::Null => None,
                    i => Some(strings(i)?.into_iter().collect()),
                };
                let mut allowed = HashMap::new();
                for (k, targets) in field(x, "allowed")?.as_object().ok_or("allowed")? {
                    allowed.insert(k.clone(), strings(targets)?.into_iter().collect());
                }
                transitions.push(Transition {
                    rule: text(x, "rule")?, field: text(x, "field")?, pointer: text(x, "pointer")?, initial, allowed,
                    message: field(x, "message")?.as_str().map(str::to_owned), mode: text(x, "mode")?,
                });
            }
            types.insert(name.clone(), TypeRules {
                name: name.clone(),
                create_schema: schema(field(t, "create_schema")?)?,
                patch_schema: schema(field(t, "patch_schema")?)?,
                schema_mode: text(t, "schema_mode")?,
                pointers: tracked.iter().map(|x| x.pointer.clone()).collect(),
                first_tokens: tracked.iter().filter_map(|x| x.tokens.first().cloned()).collect(),
                tracked,
                max_tracked_bytes: field(t, "max_tracked_bytes")?.as_u64().ok_or("max_tracked_bytes")? as usize,
                transitions,
                guard_kinds: strings(field(t, "guard_kinds")?)?.into_iter().collect(),
            });
        }
        Ok(Rules { version, types })
    }
}

/// `evaluate.clip_bytes`: at most `limit` UTF-8 bytes, with an ellipsis if cut.
pub fn clip_bytes(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn violated(rule: &str, message: &str, pointers: &[String], reason: Reason) -> Verdict {
    Verdict {
        reason,
        rule: rule.to_owned(),
        message: clip_bytes(message, MAX_MESSAGE_BYTES),
        pointers: pointers.iter().take(MAX_POINTERS).map(|p| clip_bytes(p, MAX_POINTER_BYTES)).collect(),
        mode: ENFORCE.to_owned(),
    }
}

/// `evaluate._failed`: the verdict if it refuses, else None (kept as a warning when a watching rule failed).
fn failed(verdict: Option<Verdict>, mode: &str, warnings: &mut Vec<Verdict>) -> Option<Verdict> {
    let v = verdict?;
    if mode == ENFORCE {
        return Some(v);
    }
    warnings.push(Verdict { mode: mode.to_owned(), ..v });
    None
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Create => "create",
        Kind::Update => "update",
        Kind::Delete => "delete",
        Kind::GrantEditor => "grant_editor",
        Kind::RevokeEditor => "revoke_editor",
        Kind::GrantReader => "grant_reader",
        Kind::RevokeReader => "revoke_reader",
    }
}

type Values = Vec<(String, Value)>; // pointer -> value, in the type's tracked order

fn get<'a>(values: &'a Map<String, Value>, ptr: &str) -> &'a Value {
    values.get(ptr).unwrap_or(&Value::Null)
}

/// `tracked.encode_tracked`: the canonical text of the non-null values, None when all are null.
fn encode_tracked(values: &Values) -> Option<String> {
    let kept: Map<String, Value> = values.iter().filter(|(_, v)| !v.is_null()).map(|(p, v)| (p.clone(), v.clone()))
        .collect();
    if kept.is_empty() {
        None
    } else {
        Some(canonical(&Value::Object(kept)))
    }
}

fn bounded(t: &TypeRules, values: &Values) -> (Option<Verdict>, Option<String>) {
    let text = encode_tracked(values);
    if let Some(s) = &text {
        if s.len() > t.max_tracked_bytes {
            let ptrs: Vec<String> = values.iter().filter(|(_, v)| !v.is_null()).map(|(p, _)| p.clone()).collect();
            return (Some(violated(&format!("{}:max_tracked_bytes", t.name),
                                  &format!("tracked fields are {} bytes, over the limit of {}", s.len(),
                                           t.max_tracked_bytes), &ptrs, Reason::TooLarge)), None);
        }
    }
    (None, text)
}

fn is_key(v: &Value, keys: &HashMap<String, HashSet<String>>) -> bool {
    v.as_str().is_some_and(|s| keys.contains_key(s))
}

fn transition(t: &Transition, old: &Value, new: &Value, creating: bool) -> Option<Verdict> {
    let message = t.message.as_deref().filter(|m| !m.is_empty());
    let refuse = |default: String| Some(violated(&t.rule, message.unwrap_or(&default), &[t.pointer.clone()],
                                                 Reason::RuleViolated));
    if creating {
        let ok = match &t.initial {
            Some(init) => new.as_str().is_some_and(|s| init.contains(s)),
            None => new.is_null() || is_key(new, &t.allowed),
        };
        return if ok { None } else { refuse(format!("{} may not start as {}", t.field, canonical(new))) };
    }
    if same(old, new) {
        return None;
    }
    let Some(to) = new.as_str().filter(|s| t.allowed.contains_key(*s)) else {
        return refuse(format!("{} may not become {}: not one of its states", t.field, canonical(new)));
    };
    let reachable = match old.as_str().and_then(|s| t.allowed.get(s)) {
        Some(r) => r.contains(to),
        None => match &t.initial {
            Some(init) => init.contains(to),
            None => true, // any key of allowed
        },
    };
    if reachable {
        None
    } else {
        refuse(format!("{} may not move from {} to {}", t.field, canonical(old), canonical(new)))
    }
}

/// What `watched_rules` gives: the refusing verdict (None: accepted), the tracked text after the command, and
/// the warnings (none when refused).
pub type Applied = (Option<Verdict>, Option<String>, Vec<Verdict>);

/// `evaluate.watched_rules(rules, state, command, object_type)`, or the reason the Python path must decide.
pub fn watched_rules(rules: Option<&Rules>, state: Option<&State>, c: &Command, object_type: &str)
    -> Result<Applied, Fallback> {
    let mut warnings = Vec::new();
    let (verdict, text) = apply(rules, state, c, object_type, &mut warnings)?;
    if verdict.is_some() {
        warnings.clear();
    }
    Ok((verdict, text, warnings))
}

fn apply(rules: Option<&Rules>, state: Option<&State>, c: &Command, object_type: &str, warnings: &mut Vec<Verdict>)
    -> Result<(Option<Verdict>, Option<String>), Fallback> {
    let kept = state.and_then(|s| s.tracked.clone());
    let creating = c.kind == Kind::Create;
    let Some(t) = rules.and_then(|r| r.types.get(object_type)) else {
        if creating || c.kind == Kind::Update {
            let place = match rules {
                None => "no rules are deployed".to_string(),
                Some(r) => format!("rules version {} has no such type", r.version),
            };
            // object_type passed type_name_problem on create (ASCII letters, digits, _-.): repr() quotes it so
            return Ok((Some(violated("types", &format!("type '{object_type}' is unknown: {place}"), &[],
                                     Reason::RuleViolated)), None));
        }
        return Ok((None, kept));
    };
    if t.guard_kinds.contains(kind_name(c.kind)) {
        return Err(Fallback::Guards);
    }
    let old = match &kept {
        None => Map::new(),
        Some(s) => match parse(s) {
            Ok(Value::Object(m)) => m,
            _ => return Err(Fallback::State),
        },
    };
    let new: Values = match c.kind {
        Kind::Create => {
            let payload = parse(c.payload)?;
            if let Some(sch) = t.create_schema.as_ref().filter(|x| !x.validator.is_valid(&payload)) {
                let v = failed(Some(schema_verdict(sch, &payload, &t.name, "document")?), &t.schema_mode, warnings);
                if v.is_some() {
                    return Ok((v, None));
                }
            }
            t.tracked.iter().map(|x| (x.pointer.clone(), value_at(&payload, &x.tokens))).collect()
        }
        Kind::Update => {
            let payload = parse(c.payload)?;
            if let Some(sch) = t.patch_schema.as_ref().filter(|x| !x.validator.is_valid(&payload)) {
                let v = failed(Some(schema_verdict(sch, &payload, &t.name, "patch")?), &t.schema_mode, warnings);
                if v.is_some() {
                    return Ok((v, None));
                }
            }
            let Value::Object(p) = &payload else { return Err(Fallback::Payload) };
            if p.keys().all(|k| !t.first_tokens.contains(k)) && old.keys().all(|k| t.pointers.contains(k))
                && !old.values().any(Value::is_null) {
                // the patch names no tracked field: every value stays, and so does the text (bound checked again)
                if kept.as_ref().is_some_and(|k| k.len() > t.max_tracked_bytes) {
                    let same_values = t.tracked.iter().map(|x| (x.pointer.clone(), get(&old, &x.pointer).clone()))
                        .collect();
                    return Ok((bounded(t, &same_values).0, None));
                }
                return Ok((None, kept));
            }
            let mut values = Vec::with_capacity(t.tracked.len());
            for x in &t.tracked {
                let first = x.tokens.first().ok_or(Fallback::Payload)?; // the whole document: never tracked
                let before = get(&old, &x.pointer);
                let after = if p.contains_key(first) { patched_value(before, &x.tokens, &payload) }
                            else { before.clone() };
                values.push((x.pointer.clone(), after));
            }
            values
        }
        _ => return Ok((None, kept)), // delete, grant, revoke: no guards of their kind, nothing else applies
    };
    let (verdict, text) = bounded(t, &new);
    if verdict.is_some() {
        return Ok((verdict, None));
    }
    let new_map: Map<String, Value> = new.into_iter().collect();
    for x in &t.transitions {
        let v = failed(transition(x, get(&old, &x.pointer), get(&new_map, &x.pointer), creating), &x.mode, warnings);
        if v.is_some() {
            return Ok((v, None));
        }
    }
    Ok((None, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clips_at_a_character_boundary() {
        assert_eq!(clip_bytes("abc", 3), "abc");
        assert_eq!(clip_bytes("abcdé", 5), "ab…");
        assert_eq!(clip_bytes("aébcdefg", 6), "aé…");
        assert_eq!(clip_bytes("aaébcdefg", 6), "aa…");
    }
}

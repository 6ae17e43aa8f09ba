//! JSON values as Python's `json` gives and writes them, for the team's rules (`commands.rules.tracked`).
//!
//! `parse` builds the value `json.loads` would (ints stay ints, `-0` is the int 0, the last of duplicate members
//! wins) from a text `json::object_problem` accepted; `canonical` writes `json.dumps(v, sort_keys=True,
//! separators=(",", ":"), ensure_ascii=False)`, floats as Python's `repr`. An integer outside 64 bits is `Unsure`
//! (Python's ints are unbounded; the key goes back to the Python path).

use serde_json::{Map, Number, Value};

use crate::json::Unsure;

/// `json.loads(text)` for a text `object_problem` accepted (valid JSON, no NaN, no lone surrogates).
pub fn parse(text: &str) -> Result<Value, Unsure> {
    let mut p = P { b: text.as_bytes(), s: text, i: 0 };
    p.ws();
    let v = p.value()?;
    p.ws();
    if p.i != p.b.len() {
        return Err(Unsure);
    }
    Ok(v)
}

struct P<'a> {
    b: &'a [u8],
    s: &'a str,
    i: usize,
}

impl P<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Result<(), Unsure> {
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(Unsure)
        }
    }

    fn value(&mut self) -> Result<Value, Unsure> {
        match self.b.get(self.i).copied().ok_or(Unsure)? {
            b'{' => {
                self.i += 1;
                let mut m = Map::new();
                self.ws();
                if self.b.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Value::Object(m));
                }
                loop {
                    self.ws();
                    let k = self.string()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    let v = self.value()?;
                    m.insert(k, v); // the last of duplicate members wins, as in a Python dict
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Value::Object(m));
                        }
                        _ => return Err(Unsure),
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut a = Vec::new();
                self.ws();
                if self.b.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Value::Array(a));
                }
                loop {
                    self.ws();
                    a.push(self.value()?);
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Value::Array(a));
                        }
                        _ => return Err(Unsure),
                    }
                }
            }
            b'"' => Ok(Value::String(self.string()?)),
            b'n' => self.word("null", Value::Null),
            b't' => self.word("true", Value::Bool(true)),
            b'f' => self.word("false", Value::Bool(false)),
            _ => self.number(),
        }
    }

    fn word(&mut self, w: &str, v: Value) -> Result<Value, Unsure> {
        if self.s[self.i..].starts_with(w) {
            self.i += w.len();
            Ok(v)
        } else {
            Err(Unsure)
        }
    }

    fn hex4(&mut self) -> Result<u32, Unsure> {
        let h = self.s.get(self.i..self.i + 4).ok_or(Unsure)?;
        self.i += 4;
        u32::from_str_radix(h, 16).map_err(|_| Unsure)
    }

    fn string(&mut self) -> Result<String, Unsure> {
        self.eat(b'"')?;
        let mut out = String::new();
        loop {
            let start = self.i;
            while self.i < self.b.len() && !matches!(self.b[self.i], b'"' | b'\\') {
                self.i += 1;
            }
            out.push_str(self.s.get(start..self.i).ok_or(Unsure)?);
            match self.b.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    let e = *self.b.get(self.i + 1).ok_or(Unsure)?;
                    self.i += 2;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let mut c = self.hex4()?;
                            if (0xD800..0xDC00).contains(&c) && self.s[self.i..].starts_with("\\u") {
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(Unsure);
                                }
                                c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                            }
                            out.push(char::from_u32(c).ok_or(Unsure)?);
                        }
                        _ => return Err(Unsure),
                    }
                }
                _ => return Err(Unsure),
            }
        }
    }

    fn number(&mut self) -> Result<Value, Unsure> {
        let start = self.i;
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        let mut float = false;
        if self.b.get(self.i) == Some(&b'.') {
            float = true;
            self.i += 1;
            while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
                self.i += 1;
            }
        }
        if matches!(self.b.get(self.i), Some(b'e' | b'E')) {
            float = true;
            self.i += 1;
            if matches!(self.b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
                self.i += 1;
            }
        }
        let t = &self.s[start..self.i];
        if t.is_empty() || t == "-" {
            return Err(Unsure);
        }
        if float {
            let f: f64 = t.parse().map_err(|_| Unsure)?;
            return Number::from_f64(f).map(Value::Number).ok_or(Unsure);
        }
        if let Ok(v) = t.parse::<i64>() {
            return Ok(Value::Number(v.into())); // "-0" is the int 0, as in Python
        }
        t.parse::<u64>().map(|v| Value::Number(v.into())).map_err(|_| Unsure)
    }
}

/// Python's `repr(float)`: the shortest digits that round-trip, fixed between 1e-4 and 1e16, else exponent form.
pub fn float_repr(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    let sci = format!("{:e}", f.abs());
    let (mant, exp) = sci.split_once('e').unwrap();
    let exp: i32 = exp.parse().unwrap();
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let e = exp as usize + 1;
            let (int, frac) = if digits.len() > e {
                (digits[..e].to_string(), digits[e..].to_string())
            } else {
                (format!("{digits}{}", "0".repeat(e - digits.len())), "0".to_string())
            };
            format!("{sign}{int}.{frac}")
        } else {
            format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
        }
    } else {
        let m = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits };
        format!("{sign}{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`.
pub fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write(&mut out, v);
    out
}

fn write(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_f64() {
            _ if n.is_i64() || n.is_u64() => out.push_str(&n.to_string()),
            Some(f) => out.push_str(&float_repr(f)),
            None => out.push_str(&n.to_string()),
        },
        Value::String(s) => write_str(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(out, x);
            }
            out.push(']');
        }
        Value::Object(m) => {
            // sorted by key bytes: UTF-8 order is Python's order of code points
            let mut items: Vec<(&String, &Value)> = m.iter().collect();
            items.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, x)) in items.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(out, k);
                out.push(':');
                write(out, x);
            }
            out.push('}');
        }
    }
}

/// `commands.merge_patch.merge_patch` (RFC 7386).
pub fn merge_patch(target: Option<&Value>, patch: &Value) -> Value {
    let Value::Object(p) = patch else { return patch.clone() };
    let mut result = match target {
        Some(Value::Object(t)) => t.clone(),
        _ => Map::new(),
    };
    for (name, value) in p {
        if value.is_null() {
            result.remove(name);
        } else {
            let merged = merge_patch(result.get(name), value);
            result.insert(name.clone(), merged);
        }
    }
    Value::Object(result)
}

/// `tracked.value_at`: the value at `tokens` (object members only), or null.
pub fn value_at(v: &Value, tokens: &[String]) -> Value {
    let mut v = v;
    for t in tokens {
        match v {
            Value::Object(m) => match m.get(t) {
                Some(x) => v = x,
                None => return Value::Null,
            },
            _ => return Value::Null,
        }
    }
    v.clone()
}

/// `tracked.patched_value`: the value at `tokens` after merge patch `patch`, given `old`, the value there before.
pub fn patched_value(old: &Value, tokens: &[String], patch: &Value) -> Value {
    let mut patch = patch;
    for (depth, t) in tokens.iter().enumerate() {
        let Value::Object(m) = patch else { return value_at(patch, &tokens[depth..]) };
        match m.get(t) {
            None => return old.clone(),
            Some(x) => patch = x,
        }
    }
    merge_patch(Some(old), patch)
}

/// `evaluate._same`: equal as JSON of the same Python type (1, 1.0 and true all differ).
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => {
            let (xf, yf) = (x.is_f64(), y.is_f64());
            if xf != yf {
                false
            } else if xf {
                x.as_f64() == y.as_f64()
            } else {
                x == y
            }
        }
        (Value::Array(_), Value::Array(_)) | (Value::Object(_), Value::Object(_)) => canonical(a) == canonical(b),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_python_writes_them() {
        for (f, s) in [(1.0, "1.0"), (0.1, "0.1"), (1e16, "1e+16"), (1e15, "1000000000000000.0"), (1e-4, "0.0001"),
                       (1.5e-5, "1.5e-05"), (-2.5, "-2.5"), (123456789012345680.0, "1.2345678901234568e+17"),
                       (1e300, "1e+300"), (-0.0, "-0.0"), (100.0, "100.0"), (5e-324, "5e-324"), (0.001234, "0.001234")] {
            assert_eq!(float_repr(f), s);
        }
    }

    #[test]
    fn canonical_text() {
        let v = parse("{\"b\": [1, -0, 2.50, 1E2, true, null], \"a\": \"x\\n\\u00e9\\ud83d\\ude00\\u0001\", \"a\": 3}")
            .unwrap();
        assert_eq!(canonical(&v), "{\"a\":3,\"b\":[1,0,2.5,100.0,true,null]}");
        let s = parse("{\"s\": \"q\\\"\\\\\\u001f\u{7f}é\"}").unwrap();
        assert_eq!(canonical(&s), "{\"s\":\"q\\\"\\\\\\u001f\u{7f}é\"}");
        assert_eq!(parse("{\"n\": 99999999999999999999}"), Err(Unsure));
    }

    #[test]
    fn patches() {
        let old = parse("{\"x\": 1, \"y\": {\"z\": 2}}").unwrap();
        let p = parse("{\"y\": {\"z\": null, \"w\": 3}}").unwrap();
        assert_eq!(canonical(&merge_patch(Some(&old), &p)), "{\"x\":1,\"y\":{\"w\":3}}");
        let toks = vec!["a".to_string(), "b".to_string()];
        assert_eq!(patched_value(&Value::from(5), &toks, &parse("{\"a\": {\"c\": 1}}").unwrap()), Value::from(5));
        assert_eq!(patched_value(&Value::from(5), &toks, &parse("{\"a\": 7}").unwrap()), Value::Null);
        assert_eq!(patched_value(&Value::from(5), &toks, &parse("{\"a\": {\"b\": 8}}").unwrap()), Value::from(8));
        assert!(!same(&Value::from(1), &parse("{\"a\": 1.0}").unwrap()["a"]));
    }
}

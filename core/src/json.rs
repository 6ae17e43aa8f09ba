//! `commands.json_text.object_problem`, for the texts it can decide exactly; `Err(Unsure)` for the rest.
//!
//! Python's `json` decides some texts by paths this port does not copy (NaN and Infinity, floats that
//! overflow, integers past Python's digit limit, `\u` escapes of U+0000 or a surrogate, whitespace other
//! than JSON's before the object): for those the key goes back to the Python path, which is the specification.

#[derive(Debug, PartialEq, Eq)]
pub struct Unsure;

pub type Problem = Option<String>;

pub const NOT_OBJECT: &str = "not the JSON text of an object";
pub const NOT_JSON: &str = "not valid JSON text";

/// `object_problem(text, max_depth)`: `Ok(None)` when the text is an acceptable object.
pub fn object_problem(text: &str, max_depth: usize) -> Result<Problem, Unsure> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    match b.get(i) {
        None => return Ok(Some(NOT_OBJECT.to_string())),
        Some(b'{') => {}
        // str.lstrip() strips more than JSON's whitespace (Unicode spaces, \x0b, \x1c..\x1f): not ours to decide
        Some(&c) if c >= 0x80 || matches!(c, 0x0b | 0x0c | 0x1c..=0x1f) => return Err(Unsure),
        Some(_) => return Ok(Some(NOT_OBJECT.to_string())),
    }
    let brackets = b.iter().filter(|&&c| c == b'{' || c == b'[').count();
    if brackets > max_depth && bracket_depth(b) > max_depth {
        return Ok(Some(format!("JSON nesting deeper than {max_depth} levels")));
    }
    let mut p = Parser { b, i, depth: 0 };
    match p.value() {
        Err(Fail::Unsure) => Err(Unsure),
        Err(Fail::Invalid) => Ok(Some(NOT_JSON.to_string())),
        Ok(()) => {
            p.ws();
            if p.i == b.len() {
                Ok(None)
            } else {
                Ok(Some(NOT_JSON.to_string()))
            }
        }
    }
}

fn bracket_depth(b: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0i64, 0i64);
    let (mut in_string, mut escaped) = (false, false);
    for &c in b {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
        } else if c == b'"' {
            in_string = true;
        } else if c == b'{' || c == b'[' {
            depth += 1;
            deepest = deepest.max(depth);
        } else if c == b'}' || c == b']' {
            depth -= 1;
        }
    }
    deepest.max(0) as usize
}

enum Fail {
    Invalid,
    Unsure,
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn lit(&mut self, word: &[u8]) -> Result<(), Fail> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(Fail::Invalid)
        }
    }

    fn value(&mut self) -> Result<(), Fail> {
        match self.peek() {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => self.string(),
            Some(b'n') => self.lit(b"null"),
            Some(b't') => self.lit(b"true"),
            Some(b'f') => self.lit(b"false"),
            Some(b'N') | Some(b'I') => Err(Fail::Unsure),
            Some(b'-') if self.b.get(self.i + 1) == Some(&b'I') => Err(Fail::Unsure),
            Some(c) if c == b'-' || c.is_ascii_digit() => self.number(),
            _ => Err(Fail::Invalid),
        }
    }

    fn nest(&mut self) -> Result<(), Fail> {
        self.depth += 1;
        if self.depth > 64 {
            return Err(Fail::Unsure);
        }
        Ok(())
    }

    fn object(&mut self) -> Result<(), Fail> {
        self.nest()?;
        self.i += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(Fail::Invalid);
            }
            self.string()?;
            self.ws();
            if self.peek() != Some(b':') {
                return Err(Fail::Invalid);
            }
            self.i += 1;
            self.ws();
            self.value()?;
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                }
                Some(b'}') => {
                    self.i += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(Fail::Invalid),
            }
        }
    }

    fn array(&mut self) -> Result<(), Fail> {
        self.nest()?;
        self.i += 1;
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            self.value()?;
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                }
                Some(b']') => {
                    self.i += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(Fail::Invalid),
            }
        }
    }

    fn string(&mut self) -> Result<(), Fail> {
        self.i += 1;
        loop {
            let c = self.peek().ok_or(Fail::Invalid)?;
            self.i += 1;
            match c {
                b'"' => return Ok(()),
                0..=0x1f => return Err(Fail::Invalid), // strict: no control characters in strings
                b'\\' => {
                    let e = self.peek().ok_or(Fail::Invalid)?;
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            let hex = self.b.get(self.i..self.i + 4).ok_or(Fail::Invalid)?;
                            if !hex.iter().all(|h| h.is_ascii_hexdigit()) {
                                return Err(Fail::Invalid);
                            }
                            let v = u32::from_str_radix(std::str::from_utf8(hex).unwrap(), 16).unwrap();
                            if v == 0 || (0xD800..=0xDFFF).contains(&v) {
                                return Err(Fail::Unsure); // U+0000 and surrogates: json_text's own checks
                            }
                            self.i += 4;
                        }
                        _ => return Err(Fail::Invalid),
                    }
                }
                _ => {}
            }
        }
    }

    fn number(&mut self) -> Result<(), Fail> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(c) if c.is_ascii_digit() => {
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
            }
            _ => return Err(Fail::Invalid),
        }
        let int_end = self.i;
        let mut float = false;
        if self.peek() == Some(b'.') && self.b.get(self.i + 1).is_some_and(|c| c.is_ascii_digit()) {
            float = true;
            self.i += 1;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
        }
        if matches!(self.peek(), Some(b'e') | Some(b'E')) {
            let mut j = self.i + 1;
            if matches!(self.b.get(j), Some(b'+') | Some(b'-')) {
                j += 1;
            }
            if self.b.get(j).is_some_and(|c| c.is_ascii_digit()) {
                float = true;
                self.i = j;
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
            }
        }
        if float {
            let text = std::str::from_utf8(&self.b[start..self.i]).unwrap();
            match text.parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(()),
                _ => Err(Fail::Unsure), // out of range for a double: json_text names the number
            }
        } else if int_end - start > 4000 {
            Err(Fail::Unsure) // near Python's int digit limit
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(t: &str) -> Result<Problem, Unsure> {
        object_problem(t, 32)
    }

    #[test]
    fn objects() {
        assert_eq!(p("{}"), Ok(None));
        assert_eq!(p(" {\"a\": [1, 2.5e3, -0, true, null, \"x\\u00e9\"]} "), Ok(None));
        assert_eq!(p("[]"), Ok(Some(NOT_OBJECT.into())));
        assert_eq!(p(""), Ok(Some(NOT_OBJECT.into())));
        assert_eq!(p("{\"a\":}"), Ok(Some(NOT_JSON.into())));
        assert_eq!(p("{\"a\":1,}"), Ok(Some(NOT_JSON.into())));
        assert_eq!(p("{\"a\":01}"), Ok(Some(NOT_JSON.into())));
        assert_eq!(p("{} x"), Ok(Some(NOT_JSON.into())));
        assert_eq!(p("{\"a\":NaN}"), Err(Unsure));
        assert_eq!(p("{\"a\":1e400}"), Err(Unsure));
        assert_eq!(p("{\"a\":\"\\u0000\"}"), Err(Unsure));
    }

    #[test]
    fn depth() {
        let deep = "{\"a\":".repeat(33) + "1" + &"}".repeat(33);
        assert_eq!(p(&deep), Ok(Some("JSON nesting deeper than 32 levels".into())));
        let ok = "{\"a\":".repeat(32) + "1" + &"}".repeat(32);
        assert_eq!(p(&ok), Ok(None));
    }
}

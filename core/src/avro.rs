//! Avro binary primitives, byte for byte as `schemas/binary.py` reads and writes them.
//!
//! Readers return `None` on anything the Python readers would refuse *or* read differently (a varint past
//! 64 bits, a negative array block count): the caller then hands the key back to the Python path.

pub struct Reader<'a> {
    pub data: &'a [u8],
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8], pos: usize) -> Self {
        Reader { data, pos }
    }

    pub fn byte(&mut self) -> Option<u8> {
        let b = *self.data.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    pub fn long(&mut self) -> Option<i64> {
        let mut z: u64 = 0;
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            let part = (b & 0x7F) as u64;
            if shift >= 64 || (shift > 57 && (part >> (64 - shift)) != 0) {
                return None; // past 64 bits: Python holds it as a big int; not ours to decide
            }
            z |= part << shift;
            if b < 0x80 {
                return Some(((z >> 1) as i64) ^ -((z & 1) as i64));
            }
            shift += 7;
        }
    }

    pub fn boolean(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    pub fn raw(&mut self) -> Option<&'a [u8]> {
        let n = self.long()?;
        if n < 0 {
            return None;
        }
        let end = self.pos.checked_add(n as usize)?;
        if end > self.data.len() {
            return None;
        }
        let out = &self.data[self.pos..end];
        self.pos = end;
        Some(out)
    }

    pub fn string(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.raw()?).ok()
    }

    pub fn opt_string(&mut self) -> Option<Option<&'a str>> {
        match self.byte()? {
            0 => Some(None),
            2 => Some(Some(self.string()?)),
            _ => None,
        }
    }

    pub fn opt_long(&mut self) -> Option<Option<i64>> {
        match self.byte()? {
            0 => Some(None),
            2 => Some(Some(self.long()?)),
            _ => None,
        }
    }

    /// An array in positive blocks ended by 0 (what fastavro and `write_strings` write).
    fn blocks<T>(&mut self, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let mut out = Vec::new();
        loop {
            let n = self.long()?;
            if n == 0 {
                return Some(out);
            }
            if n < 0 || n as usize > self.data.len() {
                return None;
            }
            for _ in 0..n {
                out.push(item(self)?);
            }
        }
    }

    pub fn strings(&mut self) -> Option<Vec<&'a str>> {
        self.blocks(|r| r.string())
    }

    pub fn longs(&mut self) -> Option<Vec<i64>> {
        self.blocks(|r| r.long())
    }

    pub fn at_end(&self) -> bool {
        self.pos == self.data.len()
    }
}

pub fn write_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8 & 0x7F) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

pub fn write_bytes(out: &mut Vec<u8>, b: &[u8]) {
    write_long(out, b.len() as i64);
    out.extend_from_slice(b);
}

pub fn write_string(out: &mut Vec<u8>, s: &str) {
    write_bytes(out, s.as_bytes());
}

pub fn write_opt_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some(s) => {
            out.push(2);
            write_string(out, s);
        }
    }
}

pub fn write_opt_long(out: &mut Vec<u8>, v: Option<i64>) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(2);
            write_long(out, v);
        }
    }
}

pub fn write_strings<S: AsRef<str>>(out: &mut Vec<u8>, items: &[S]) {
    if !items.is_empty() {
        write_long(out, items.len() as i64);
        for s in items {
            write_string(out, s.as_ref());
        }
    }
    out.push(0);
}

pub fn write_longs(out: &mut Vec<u8>, items: &[i64]) {
    if !items.is_empty() {
        write_long(out, items.len() as i64);
        for v in items {
            write_long(out, *v);
        }
    }
    out.push(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longs_round_trip() {
        for v in [0i64, 1, -1, 63, -64, 64, 1 << 40, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            write_long(&mut out, v);
            assert_eq!(Reader::new(&out, 0).long(), Some(v));
        }
    }

    #[test]
    fn eleven_byte_varint_is_refused() {
        let data = [0xFFu8; 11];
        assert_eq!(Reader::new(&data, 0).long(), None);
    }

    #[test]
    fn empty_array_is_one_zero() {
        let mut out = Vec::new();
        write_strings::<&str>(&mut out, &[]);
        assert_eq!(out, vec![0]);
    }
}

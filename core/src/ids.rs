//! Deterministic ids and digests, as `commands/ids.py`, `commands.command.fingerprint`, `app/signing.py` and
//! `app/validator/murmur2.py` compute them.

use blake2::digest::{Update, VariableOutput};
use hmac::{Hmac, Mac};
use sha1::{Digest, Sha1};
use sha2::Sha256;

const NAMESPACE: [u8; 16] = [
    0x6f, 0x1c, 0x2a, 0x4e, 0x3b, 0x7d, 0x5e, 0x8f, 0x9a, 0x10, 0xa7, 0xb1, 0xc2, 0xd3, 0xe4, 0xf5,
];
const HEX: &[u8; 16] = b"0123456789abcdef";

/// `str(uuid.uuid5(ARBITER_NAMESPACE, name))`.
pub fn uuid5(name: &str) -> String {
    let mut h = Sha1::new();
    Digest::update(&mut h, NAMESPACE);
    Digest::update(&mut h, name.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    b[6] = (b[6] & 0x0F) | 0x50;
    b[8] = (b[8] & 0x3F) | 0x80;
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if i == 4 || i == 6 || i == 8 || i == 10 {
            s.push('-');
        }
        s.push(HEX[(byte >> 4) as usize] as char);
        s.push(HEX[(byte & 15) as usize] as char);
    }
    s
}

pub fn event_id(object_id: &str, version: i64) -> String {
    uuid5(&format!("{object_id}:{version}"))
}

pub fn command_rejection_id(command_id: &str, object_id: &str, version: i64, reason: &str, principal: &str) -> String {
    uuid5(&format!("rejection:{principal}:{command_id}:{object_id}:{version}:{reason}"))
}

/// `commands.command.fingerprint`: blake2b-64 of kind, object, expected version and payload, as a signed long.
pub fn fingerprint(kind_name: &str, object_id: &str, expected: Option<i64>, payload: &str) -> i64 {
    let mut h = blake2::Blake2bVar::new(8).expect("8 is a valid blake2b size");
    let ev = expected.map(|v| v.to_string()).unwrap_or_default();
    h.update(format!("{kind_name}\u{0}{object_id}\u{0}{ev}\u{0}").as_bytes());
    h.update(payload.as_bytes());
    let mut out = [0u8; 8];
    h.finalize_variable(&mut out).expect("8 bytes");
    i64::from_be_bytes(out)
}

/// Kafka's murmur2, as the Java client computes it (signed 32-bit).
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5BD1_E995;
    let len = data.len();
    let mut h: u32 = 0x9747_B28C ^ (len as u32);
    let end = len - (len & 3);
    for chunk in data[..end].chunks_exact(4) {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        h = h.wrapping_mul(M) ^ k.wrapping_mul(M);
    }
    let rest = len & 3;
    if rest == 3 {
        h ^= (data[end + 2] as u32) << 16;
    }
    if rest >= 2 {
        h ^= (data[end + 1] as u32) << 8;
    }
    if rest >= 1 {
        h ^= data[end] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

pub fn partition_for(key: &[u8], partitions: i64) -> i64 {
    ((murmur2(key) as u32 & 0x7FFF_FFFF) as i64) % partitions
}

const DOMAIN: &[u8] = b"arbiter-command-record-v1\x00";

/// Whether `signature` (`<kid>:<base64url mac>`) is a genuine `arbiter-signature` of `key` and `value` under `keys`.
pub fn signature_valid(keys: &[(Vec<u8>, Vec<u8>)], key: Option<&[u8]>, value: &[u8], signature: &[u8]) -> bool {
    let Some(colon) = signature.iter().position(|&b| b == b':') else { return false };
    let (kid, mac) = (&signature[..colon], &signature[colon + 1..]);
    let Some((_, secret)) = keys.iter().find(|(k, _)| k.as_slice() == kid) else { return false };
    let mut h = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes any key");
    Mac::update(&mut h, DOMAIN);
    match key {
        None => Mac::update(&mut h, b"\xff\xff\xff\xff"),
        Some(k) => {
            Mac::update(&mut h, &(k.len() as u32).to_be_bytes());
            Mac::update(&mut h, k);
        }
    }
    Mac::update(&mut h, value);
    let digest = h.finalize().into_bytes();
    let expected = base64url(&digest);
    // compare_digest: constant time in the contents
    expected.len() == mac.len() && expected.iter().zip(mac).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

fn base64url(data: &[u8]) -> Vec<u8> {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = Vec::with_capacity(data.len() * 4 / 3 + 3);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        out.push(A[(n >> 18) as usize & 63]);
        out.push(A[(n >> 12) as usize & 63]);
        if c.len() > 1 {
            out.push(A[(n >> 6) as usize & 63]);
        }
        if c.len() > 2 {
            out.push(A[n as usize & 63]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid5_matches_python() {
        // python -c "from commands.ids import event_id; print(event_id('obj-1', 1))"
        assert_eq!(event_id("obj-1", 1).len(), 36);
        assert_eq!(&event_id("obj-1", 1)[14..15], "5");
    }

    #[test]
    fn murmur2_matches_kafka() {
        // Kafka's own test vectors (UtilsTest.testMurmur2)
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);
        assert_eq!(murmur2(b"abc"), 479470107);
    }

    #[test]
    fn base64url_has_no_padding() {
        assert_eq!(base64url(b"f"), b"Zg".to_vec());
        assert_eq!(base64url(b"fo"), b"Zm8".to_vec());
        assert_eq!(base64url(b"foo"), b"Zm9v".to_vec());
    }
}

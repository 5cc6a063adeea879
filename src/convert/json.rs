//! A small byte-level JSON pull reader (RFC 8259), with the I-JSON restrictions of RFC 7493 that
//! floe enforces: no lone surrogates, no duplicate keys (checked by the caller with [`KeySet`]),
//! nesting bounded by [`MAX_DEPTH`]. Numbers are returned as their exact text, never as `f64`.
//!
//! The reader never panics and never recurses by itself; callers recurse at most [`MAX_DEPTH`] deep.
//! UTF-8 (RFC 3629) is checked inside strings, where non-ASCII bytes may appear (a string that holds
//! any is validated with `std::str::from_utf8`); anywhere else a non-ASCII byte is a syntax error, so
//! a record that is not valid UTF-8 is always refused without a separate pass over it.

/// Deepest nesting of arrays/objects accepted in a record (the record's own object is level 1).
pub const MAX_DEPTH: usize = 128;

/// A syntax error: the record is not JSON (DESERIALIZATION_ERROR). Boxed: it is rare, and a
/// pointer-sized error keeps every `Result` of the hot path in registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SyntaxError(Box<(usize, &'static str)>);

impl SyntaxError {
    /// Byte offset in the record.
    pub fn offset(&self) -> usize {
        self.0 .0
    }
    /// What was wrong.
    pub fn what(&self) -> &'static str {
        self.0 .1
    }
}

/// A scanned string token: the bytes between the quotes, and whether they hold escapes. Packed in
/// one `u64` (start: bits 0–31, end: bits 32–62, escaped: bit 63) so that it is returned in a
/// register; [`Reader::new`] buffers are below 2 GiB ([`MAX_READER_LEN`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StrTok(u64);

impl StrTok {
    #[inline]
    fn new(start: usize, end: usize, escaped: bool) -> Self {
        StrTok(start as u64 | (end as u64) << 32 | u64::from(escaped) << 63)
    }
    /// Offset of the first content byte.
    #[inline]
    pub fn start(self) -> usize {
        (self.0 & 0xFFFF_FFFF) as usize
    }
    /// Offset of the closing quote.
    #[inline]
    pub fn end(self) -> usize {
        ((self.0 >> 32) & 0x7FFF_FFFF) as usize
    }
    /// The content holds escapes.
    #[inline]
    pub fn escaped(self) -> bool {
        self.0 >> 63 != 0
    }
    /// The token's content range in the buffer.
    #[inline]
    pub fn range(self) -> std::ops::Range<usize> {
        self.start()..self.end()
    }
}

/// A scanned number token, packed like [`StrTok`] (bit 63: an integer literal, i.e. no fraction
/// and no exponent).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NumTok(u64);

impl NumTok {
    #[inline]
    fn new(start: usize, end: usize, literal: bool) -> Self {
        NumTok(start as u64 | (end as u64) << 32 | u64::from(literal) << 63)
    }
    /// No fraction and no exponent.
    #[inline]
    pub fn literal(self) -> bool {
        self.0 >> 63 != 0
    }
    /// Offset after the token.
    #[inline]
    pub fn end(self) -> usize {
        ((self.0 >> 32) & 0x7FFF_FFFF) as usize
    }
    /// The token's range in the buffer.
    #[inline]
    pub fn range(self) -> std::ops::Range<usize> {
        (self.0 & 0xFFFF_FFFF) as usize..self.end()
    }
}

/// Largest buffer a [`Reader`] reads (token offsets are packed in 31 bits).
pub const MAX_READER_LEN: usize = i32::MAX as usize;

pub(crate) struct Reader<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    #[cold]
    #[inline(never)]
    pub fn err(&self, what: &'static str) -> SyntaxError {
        SyntaxError(Box::new((self.pos, what)))
    }

    /// Skips whitespace and returns the next byte without consuming it.
    #[inline]
    pub fn peek(&mut self) -> Option<u8> {
        while let Some(&c) = self.buf.get(self.pos) {
            if c == b' ' || c == b'\n' || c == b'\r' || c == b'\t' {
                self.pos += 1;
            } else {
                return Some(c);
            }
        }
        None
    }

    /// Consumes `c` (after whitespace) or fails.
    #[inline]
    pub fn expect(&mut self, c: u8, what: &'static str) -> Result<(), SyntaxError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(what))
        }
    }

    /// Consumes the literal `lit` (`true`, `false`, `null`) at the current position.
    #[inline]
    pub fn literal(&mut self, lit: &'static [u8]) -> Result<(), SyntaxError> {
        if self.buf.get(self.pos..self.pos + lit.len()) == Some(lit) {
            self.pos += lit.len();
            Ok(())
        } else {
            Err(self.err("invalid literal"))
        }
    }

    /// Scans a string starting at `"`; validates escapes (including surrogate pairing), rejects
    /// control characters, and checks that non-ASCII bytes are valid UTF-8. Leaves `pos` after the
    /// closing quote.
    #[inline]
    pub fn scan_string(&mut self) -> Result<StrTok, SyntaxError> {
        if self.buf.get(self.pos) != Some(&b'"') {
            return Err(self.err("expected a string"));
        }
        self.pos += 1;
        let start = self.pos;
        let buf = self.buf;
        let mut i = self.pos;
        let mut escaped = false;
        let mut non_ascii = false;
        loop {
            // Fast path: 8 bytes at a time, stopping exactly at the first special byte (the lowest
            // flagged byte of `special_bytes` is exact: borrows only run toward higher bytes).
            while let Some(chunk) = buf.get(i..i + 8) {
                let Ok(a) = <[u8; 8]>::try_from(chunk) else {
                    break;
                };
                let m = special_bytes(u64::from_le_bytes(a));
                if m != 0 {
                    i += (m.trailing_zeros() / 8) as usize;
                    break;
                }
                i += 8;
            }
            // One byte: a special one, or a plain one among the last 7 of the buffer.
            match buf.get(i) {
                Some(b'"') => {
                    if non_ascii && std::str::from_utf8(&buf[start..i]).is_err() {
                        self.pos = start;
                        return Err(self.err("invalid UTF-8 in string"));
                    }
                    self.pos = i + 1;
                    return Ok(StrTok::new(start, i, escaped));
                }
                Some(b'\\') => {
                    escaped = true;
                    i = self.check_escape(i)?;
                }
                Some(0x00..=0x1f) => {
                    self.pos = i;
                    return Err(self.err("control character in string"));
                }
                Some(&c) => {
                    non_ascii |= c >= 0x80;
                    i += 1;
                }
                None => {
                    self.pos = i;
                    return Err(self.err("unterminated string"));
                }
            }
        }
    }

    /// Validates the escape at `buf[i] == '\\'`; returns the index after it.
    fn check_escape(&mut self, i: usize) -> Result<usize, SyntaxError> {
        let buf = self.buf;
        match buf.get(i + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(i + 2),
            Some(b'u') => {
                let Some(cu) = hex4(buf, i + 2) else {
                    self.pos = i;
                    return Err(self.err("invalid \\u escape"));
                };
                match cu {
                    0xD800..=0xDBFF => {
                        if buf.get(i + 6) == Some(&b'\\') && buf.get(i + 7) == Some(&b'u') {
                            if let Some(lo @ 0xDC00..=0xDFFF) = hex4(buf, i + 8) {
                                let _ = lo;
                                return Ok(i + 12);
                            }
                        }
                        self.pos = i;
                        Err(self.err("unpaired surrogate escape"))
                    }
                    0xDC00..=0xDFFF => {
                        self.pos = i;
                        Err(self.err("unpaired surrogate escape"))
                    }
                    _ => Ok(i + 6),
                }
            }
            _ => {
                self.pos = i;
                Err(self.err("invalid escape"))
            }
        }
    }

    /// Scans a number token (JSON grammar) at the current position.
    #[inline]
    pub fn scan_number(&mut self) -> Result<NumTok, SyntaxError> {
        let buf = self.buf;
        let start = self.pos;
        let mut i = start;
        if buf.get(i) == Some(&b'-') {
            i += 1;
        }
        match buf.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                i += 1;
                while let Some(b'0'..=b'9') = buf.get(i) {
                    i += 1;
                }
            }
            _ => {
                self.pos = i;
                return Err(self.err("invalid number"));
            }
        }
        let mut literal = true;
        if buf.get(i) == Some(&b'.') {
            literal = false;
            i += 1;
            let s = i;
            while let Some(b'0'..=b'9') = buf.get(i) {
                i += 1;
            }
            if i == s {
                self.pos = i;
                return Err(self.err("invalid number"));
            }
        }
        if let Some(b'e' | b'E') = buf.get(i) {
            literal = false;
            i += 1;
            if let Some(b'+' | b'-') = buf.get(i) {
                i += 1;
            }
            let s = i;
            while let Some(b'0'..=b'9') = buf.get(i) {
                i += 1;
            }
            if i == s {
                self.pos = i;
                return Err(self.err("invalid number"));
            }
        }
        // A number must be followed by a delimiter (e.g. `01` or `1x` are not JSON).
        if let Some(&c) = buf.get(i) {
            if !matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                self.pos = i;
                return Err(self.err("invalid number"));
            }
        }
        self.pos = i;
        Ok(NumTok::new(start, i, literal))
    }
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Non-zero when one of the 8 bytes of `v` is `"`, `\\`, a control character or non-ASCII (it may
/// also flag a few plain bytes after such a byte: callers then look byte by byte).
#[inline]
fn special_bytes(v: u64) -> u64 {
    let q = v ^ (LO * u64::from(b'"'));
    let b = v ^ (LO * u64::from(b'\\'));
    let zq = q.wrapping_sub(LO) & !q;
    let zb = b.wrapping_sub(LO) & !b;
    let ctrl = v.wrapping_sub(LO * 0x20) & !v;
    (zq | zb | ctrl | v) & HI
}

fn hex4(buf: &[u8], i: usize) -> Option<u32> {
    let s = buf.get(i..i + 4)?;
    let mut v = 0u32;
    for &c in s {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        v = v * 16 + u32::from(d);
    }
    Some(v)
}

/// Appends the unescaped content of a string token (already validated by
/// [`Reader::scan_string`]) to `out`.
pub(crate) fn unescape(raw: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < raw.len() {
        let start = i;
        while i < raw.len() && raw[i] != b'\\' {
            i += 1;
        }
        out.extend_from_slice(&raw[start..i]);
        if i >= raw.len() {
            break;
        }
        let c = raw.get(i + 1).copied().unwrap_or(b'\\');
        i += 2;
        let ch: u32 = match c {
            b'b' => 0x08,
            b'f' => 0x0C,
            b'n' => 0x0A,
            b'r' => 0x0D,
            b't' => 0x09,
            b'u' => {
                let hi = hex4(raw, i).unwrap_or(0xFFFD);
                i += 4;
                if (0xD800..=0xDBFF).contains(&hi) {
                    let lo = hex4(raw, i + 2).unwrap_or(0xDC00);
                    i += 6;
                    0x10000 + ((hi - 0xD800) << 10) + (lo.saturating_sub(0xDC00) & 0x3FF)
                } else {
                    hi
                }
            }
            other => u32::from(other),
        };
        let ch = char::from_u32(ch).unwrap_or('\u{FFFD}');
        let mut tmp = [0u8; 4];
        out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
    }
}

/// The keys of one JSON object, for duplicate detection (RFC 7493 §2.3). Reused across records.
#[derive(Default)]
pub(crate) struct KeySet {
    bytes: Vec<u8>,
    spans: Vec<(u32, u32)>,
}

impl KeySet {
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
    }

    /// Adds a key (raw token bytes; unescaped here when needed).
    pub fn push(&mut self, raw: &[u8], escaped: bool) {
        let start = self.bytes.len();
        if escaped {
            unescape(raw, &mut self.bytes);
        } else {
            self.bytes.extend_from_slice(raw);
        }
        let end = self.bytes.len();
        self.spans.push((start as u32, end as u32));
    }

    /// Whether any key occurs twice.
    #[inline]
    pub fn has_duplicates(&mut self) -> bool {
        self.spans.len() >= 2 && has_duplicate_spans(&self.bytes, &mut self.spans)
    }
}

/// Whether two spans of `data` hold the same bytes (sorts `spans`).
pub(crate) fn has_duplicate_spans(data: &[u8], spans: &mut [(u32, u32)]) -> bool {
    let get = |s: &(u32, u32)| data.get(s.0 as usize..s.1 as usize).unwrap_or(&[]);
    let n = spans.len();
    if n < 2 {
        return false;
    }
    if n <= 8 {
        for a in 0..n {
            for b in a + 1..n {
                if get(&spans[a]) == get(&spans[b]) {
                    return true;
                }
            }
        }
        return false;
    }
    spans.sort_unstable_by(|a, b| get(a).cmp(get(b)));
    spans.windows(2).any(|w| get(&w[0]) == get(&w[1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(input: &str) -> Result<(String, bool), SyntaxError> {
        let mut r = Reader::new(input.as_bytes());
        let t = r.scan_string()?;
        let mut out = Vec::new();
        unescape(&input.as_bytes()[t.range()], &mut out);
        Ok((String::from_utf8(out).unwrap(), t.escaped()))
    }

    #[test]
    fn strings_unescape() {
        assert_eq!(s(r#""abc""#).unwrap(), ("abc".into(), false));
        assert_eq!(s(r#""a\"b\\c\/\n""#).unwrap().0, "a\"b\\c/\n");
        assert_eq!(s(r#""\u00e9\ud83d\ude00""#).unwrap().0, "é😀");
    }

    #[test]
    fn lone_surrogates_and_bad_escapes_are_errors() {
        for bad in [
            r#""\ud83d""#,
            r#""\ude00""#,
            r#""\ud83dx""#,
            r#""\ud83d\u0041""#,
            r#""\x""#,
            r#""\u12""#,
            "\"a\u{1}\"",
            r#""abc"#,
        ] {
            assert!(s(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn numbers_follow_the_grammar() {
        for (t, lit) in [
            ("0", true),
            ("-12", true),
            ("1.5", false),
            ("1e2", false),
            ("-0.0E-3", false),
        ] {
            let mut r = Reader::new(t.as_bytes());
            let n = r.scan_number().unwrap();
            assert_eq!((n.end(), n.literal()), (t.len(), lit), "{t}");
        }
        for bad in [
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "+1",
            "1x",
            "NaN",
            "Infinity",
            "-Infinity",
        ] {
            let mut r = Reader::new(bad.as_bytes());
            assert!(r.scan_number().is_err(), "{bad}");
        }
    }

    #[test]
    fn strings_must_be_valid_utf8() {
        for bad in [
            &b"\"\xff\""[..],
            b"\"a\xc3\"",
            b"\"\xed\xa0\x80\"",
            b"\"abcdefgh\xc0\xafxyz\"",
        ] {
            let mut r = Reader::new(bad);
            assert!(r.scan_string().is_err(), "{bad:?}");
        }
        let ok = "\"h\u{e9}llo w\u{f6}rld, 8+ bytes \u{1F600}\"";
        let mut r = Reader::new(ok.as_bytes());
        assert!(r.scan_string().is_ok());
    }

    proptest::proptest! {
        #[test]
        fn strings_agree_with_serde_json(parts in proptest::collection::vec(proptest::prop_oneof![
            proptest::strategy::Just("a".to_string()),
            proptest::strategy::Just("abcdefghij".to_string()),
            proptest::strategy::Just("\\\"".to_string()),
            proptest::strategy::Just("\\\\".to_string()),
            proptest::strategy::Just("\\u00e9".to_string()),
            proptest::strategy::Just("\\ud83d\\ude00".to_string()),
            proptest::strategy::Just("\\ud83d".to_string()),
            proptest::strategy::Just("\\x".to_string()),
            proptest::strategy::Just("\u{1}".to_string()),
            proptest::strategy::Just("é€😀".to_string()),
            proptest::strategy::Just("\"".to_string()),
        ], 0..12), bad_byte in proptest::option::of((0usize..64, 0x80u8..=0xff))) {
            let mut bytes = b"\"".to_vec();
            bytes.extend_from_slice(parts.concat().as_bytes());
            bytes.push(b'"');
            if let Some((at, b)) = bad_byte {
                let n = bytes.len();
                bytes[1 + at % (n - 1)] = b;
            }
            let reference = serde_json::from_slice::<String>(&bytes);
            let mut r = Reader::new(&bytes);
            let ours = r.scan_string().map(|t| {
                let mut out = Vec::new();
                unescape(&bytes[t.range()], &mut out);
                (out, r.pos)
            });
            match (reference, ours) {
                (Ok(s), Ok((out, pos))) => {
                    proptest::prop_assert_eq!(s.as_bytes(), &out[..]);
                    proptest::prop_assert_eq!(pos, bytes.len());
                }
                (Err(_), Err(_)) => {}
                // serde_json stops at the first closing quote; we may too, leaving trailing bytes.
                (Err(_), Ok((_, pos))) => proptest::prop_assert!(pos < bytes.len()),
                (Ok(s), Err(e)) => proptest::prop_assert!(false, "serde_json accepts {:?}, we refuse: {:?}", s, e),
            }
        }
    }

    #[test]
    fn special_bytes_finds_every_stop_byte() {
        for c in [b'"', b'\\', 0x00, 0x1f, 0x80, 0xff] {
            for pos in 0..8 {
                let mut a = *b"abcdefgh";
                a[pos] = c;
                assert_ne!(special_bytes(u64::from_le_bytes(a)), 0, "{c} at {pos}");
            }
        }
        assert_eq!(special_bytes(u64::from_le_bytes(*b"a ~!#[]{")), 0);
    }

    #[test]
    fn duplicate_keys_found_after_unescaping() {
        let mut k = KeySet::default();
        k.push(b"a", false);
        k.push(br"\u0061", true);
        assert!(k.has_duplicates());
        k.clear();
        for i in 0..20u8 {
            k.push(&[b'a' + i], false);
        }
        assert!(!k.has_duplicates());
        k.push(b"c", false);
        assert!(k.has_duplicates());
    }
}

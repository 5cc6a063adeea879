//! The JSON Schema decoder: one pass over a JSON record's bytes, driven by the mapped JSON Schema,
//! validating every value (docs/schema-mapping.md "Value rules") while appending it to its column.
//!
//! Errors come in two kinds. A syntax error (the record is not JSON, per RFC 8259 and RFC 7493) stops
//! the pass at once: `DESERIALIZATION_ERROR`. A value error (wrong type, out of range, missing field)
//! is recorded — the first one in document order wins — and the pass goes on *skipping* (but still
//! fully checking the syntax of) the rest of the record, so that a record that is not JSON is always
//! reported as such. Either way the caller rolls every column back to its length before the record.

use base64::Engine as _;

use arrow_buffer::BooleanBufferBuilder;

use super::column::{
    Col, Data, DecMultiple, DecimalPlan, LargeVarBuf, ListCol, MapCol, StructCol, VarBuf,
};
use super::json::{has_duplicate_spans, unescape, KeySet, NumTok, Reader, SyntaxError, MAX_DEPTH};
use super::time::{parse_date, parse_date_time, parse_time, TimeError};
use super::{DlqCode, DlqReason};
use crate::schema::{
    cmp_parts, escape_pointer_token, normalize_number, Draft, EnumMember, IntSpec, JsonType,
    NumSpec, StrFormat, StrSpec,
};

type Res = Result<(), SyntaxError>;

/// Buffers reused from record to record (no allocation per record once warm).
#[derive(Default)]
pub(crate) struct Scratch {
    keysets: Vec<KeySet>,
    digits: Vec<u8>,
    strbuf: Vec<u8>,
    keybuf: Vec<u8>,
    spans: Vec<(u32, u32)>,
}

pub(crate) struct Ctx<'a, 'n> {
    pub r: Reader<'a>,
    depth: usize,
    pub err: Option<DlqReason>,
    /// The error's pointer is built on the way out, only when there is an error: a failing value
    /// records its pointer relative to its container, and the container at depth `pending`
    /// prepends the segment of the child it just decoded (then its parent, up to the record).
    pending: usize,
    names: &'n [Box<str>],
    s: &'n mut Scratch,
    draft: Draft,
    pub partition_us: Option<i64>,
}

/// Which keys of a struct were seen.
enum Seen {
    Small(u64),
    Large(Vec<bool>),
}

impl Seen {
    #[inline]
    fn new(n: usize) -> Seen {
        if n <= 64 {
            Seen::Small(0)
        } else {
            Seen::Large(vec![false; n])
        }
    }
    #[inline]
    fn test_and_set(&mut self, i: usize) -> bool {
        match self {
            Seen::Small(b) => {
                let m = 1u64 << i;
                let was = *b & m != 0;
                *b |= m;
                was
            }
            Seen::Large(v) => std::mem::replace(&mut v[i], true),
        }
    }
    #[inline]
    fn get(&self, i: usize) -> bool {
        match self {
            Seen::Small(b) => *b & (1u64 << i) != 0,
            Seen::Large(v) => v[i],
        }
    }
    /// Whether all of the first `n` fields were seen.
    #[inline]
    fn all(&self, n: usize) -> bool {
        match self {
            Seen::Small(b) => *b == u64::MAX >> (64 - n.clamp(1, 64)),
            Seen::Large(v) => v.iter().all(|&x| x),
        }
    }
}

fn kind_of(c: u8) -> &'static str {
    match c {
        b'"' => "string",
        b'{' => "object",
        b'[' => "array",
        b't' | b'f' => "boolean",
        b'n' => "null",
        b'-' | b'0'..=b'9' => "number",
        _ => "invalid JSON",
    }
}

#[inline]
fn is_num_start(c: u8) -> bool {
    c == b'-' || c.is_ascii_digit()
}

/// Unicode code points in a UTF-8 string (non-continuation bytes).
fn char_count(b: &[u8]) -> u64 {
    b.iter().filter(|&&c| (c as i8) >= -0x40).count() as u64
}

impl<'a, 'n> Ctx<'a, 'n> {
    pub fn new(buf: &'a [u8], names: &'n [Box<str>], s: &'n mut Scratch, draft: Draft) -> Self {
        if s.keysets.len() < MAX_DEPTH + 2 {
            s.keysets.resize_with(MAX_DEPTH + 2, KeySet::default);
        }
        Ctx {
            r: Reader::new(buf),
            depth: 0,
            err: None,
            pending: usize::MAX,
            names,
            s,
            draft,
            partition_us: None,
        }
    }

    /// Records a value error (the first one wins) about the value being decoded.
    #[cold]
    fn fail(&mut self, code: DlqCode, message: impl FnOnce() -> String) {
        self.fail_at(code, None, self.depth, message);
    }

    /// Records a value error about the child `rel` of the current container (or the container
    /// itself when `None`); the container at depth `pending` continues the pointer.
    #[cold]
    fn fail_at(
        &mut self,
        code: DlqCode,
        rel: Option<&str>,
        pending: usize,
        message: impl FnOnce() -> String,
    ) {
        if self.err.is_none() {
            let field = rel
                .map(|r| format!("/{}", escape_pointer_token(r)))
                .unwrap_or_default();
            self.err = Some(DlqReason {
                code,
                field,
                message: message(),
            });
            self.pending = pending;
        }
    }

    /// Prepends a segment to the error's pointer (the caller is the container at `pending`).
    #[cold]
    fn prepend(&mut self, seg: &str) {
        if let Some(e) = &mut self.err {
            e.field
                .insert_str(0, &format!("/{}", escape_pointer_token(seg)));
        }
        self.pending = self.pending.wrapping_sub(1);
    }

    #[cold]
    fn type_mismatch(&mut self, c: u8, expected: &'static str) -> Res {
        if c == b'n' || kind_of(c) != "invalid JSON" {
            self.fail(DlqCode::TypeMismatch, || {
                format!("expected {expected}, got {}", kind_of(c))
            });
        }
        self.skip_value()
    }

    #[inline]
    fn enter(&mut self) -> Res {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.r.err("nesting deeper than 128 levels"));
        }
        Ok(())
    }

    /// Decodes the record: a JSON object for `root`. On success `root.len` grew by one.
    pub fn decode_record(&mut self, root: &mut StructCol) -> Res {
        match self.r.peek() {
            None => return Err(self.r.err("empty record")),
            Some(b'{') => self.decode_struct(root)?,
            Some(c) => self.type_mismatch(c, "a JSON object (the record)")?,
        }
        if self.r.peek().is_some() {
            return Err(self.r.err("trailing characters after the record"));
        }
        Ok(())
    }

    /// Skips one value, still checking its syntax, depth and duplicate keys.
    pub fn skip_value(&mut self) -> Res {
        match self.r.peek() {
            Some(b'"') => {
                self.r.scan_string()?;
            }
            Some(b'{') => {
                self.r.pos += 1;
                self.enter()?;
                let d = self.depth;
                self.s.keysets[d].clear();
                if self.r.peek() == Some(b'}') {
                    self.r.pos += 1;
                } else {
                    loop {
                        if self.r.peek() != Some(b'"') {
                            return Err(self.r.err("expected a key"));
                        }
                        let k = self.r.scan_string()?;
                        let buf = self.r.buf;
                        self.s.keysets[d].push(&buf[k.range()], k.escaped());
                        self.r.expect(b':', "expected ':'")?;
                        self.skip_value()?;
                        match self.r.peek() {
                            Some(b',') => self.r.pos += 1,
                            Some(b'}') => {
                                self.r.pos += 1;
                                break;
                            }
                            _ => return Err(self.r.err("expected ',' or '}'")),
                        }
                    }
                    if self.s.keysets[d].has_duplicates() {
                        return Err(self.r.err("duplicate key in an object"));
                    }
                }
                self.depth -= 1;
            }
            Some(b'[') => {
                self.r.pos += 1;
                self.enter()?;
                if self.r.peek() == Some(b']') {
                    self.r.pos += 1;
                } else {
                    loop {
                        self.skip_value()?;
                        match self.r.peek() {
                            Some(b',') => self.r.pos += 1,
                            Some(b']') => {
                                self.r.pos += 1;
                                break;
                            }
                            _ => return Err(self.r.err("expected ',' or ']'")),
                        }
                    }
                }
                self.depth -= 1;
            }
            Some(b't') => self.r.literal(b"true")?,
            Some(b'f') => self.r.literal(b"false")?,
            Some(b'n') => self.r.literal(b"null")?,
            Some(c) if is_num_start(c) => {
                self.r.scan_number()?;
            }
            Some(_) => return Err(self.r.err("unexpected character")),
            None => return Err(self.r.err("unexpected end of input")),
        }
        Ok(())
    }

    #[cold]
    fn on_null(&mut self, col: &mut Col) {
        if col.meta.admits_null {
            col.push_null();
        } else if matches!(&col.data, Data::Enum(_, plan) if plan.null_refused_by_enum) {
            self.fail(DlqCode::ValueOutOfRange, || {
                "null is not one of the enum values".to_string()
            });
        } else if col.meta.is_partition {
            self.fail(DlqCode::MissingPartitionValue, || {
                "the partition field is null".to_string()
            });
        } else if col.meta.required {
            self.fail(DlqCode::MissingRequiredField, || {
                "required field is null".to_string()
            });
        } else {
            self.fail(DlqCode::TypeMismatch, || {
                "null is not allowed here".to_string()
            });
        }
    }

    /// Decodes one value into `col`.
    pub fn decode(&mut self, col: &mut Col) -> Res {
        if self.err.is_some() {
            return self.skip_value();
        }
        let Some(c) = self.r.peek() else {
            return Err(self.r.err("unexpected end of input"));
        };
        if c == b'n' {
            self.r.literal(b"null")?;
            self.on_null(col);
            return Ok(());
        }
        let Col {
            meta,
            validity,
            data,
            ..
        } = col;
        // Each arm appends the value and says so, or records why not (then nothing is appended).
        let appended = match data {
            Data::Bool(b) => self.decode_bool(c, b)?,
            Data::Int(v, spec) => {
                let (min, max) = (i128::from(i32::MIN), i128::from(i32::MAX));
                let x = self.decode_integer(c, spec, min, max, "int")?;
                x.map(|x| v.push(x as i32)).is_some()
            }
            Data::Long(v, spec) => {
                let (min, max) = (i128::from(i64::MIN), i128::from(i64::MAX));
                let x = self.decode_integer(c, spec, min, max, "long")?;
                x.map(|x| v.push(x as i64)).is_some()
            }
            Data::Double(v, spec) => self.decode_double(c, v, spec)?,
            Data::Decimal(v, plan) => self.decode_decimal(c, v, plan)?,
            Data::Str(vb, spec) => self.decode_str(c, vb, spec)?,
            Data::Enum(vb, spec) => {
                let member = self.decode_enum(c, &mut vb.data, spec)?;
                if member {
                    vb.commit();
                }
                member
            }
            Data::Timestamptz(v, spec) => {
                let what = ("string (date-time)", "an RFC 3339 date-time");
                let us = self.decode_temporal(c, spec, what, parse_date_time)?;
                if let (Some(us), true) = (us, meta.is_partition) {
                    self.partition_us = Some(us);
                }
                us.map(|us| v.push(us)).is_some()
            }
            Data::Date(v, spec) => {
                let what = ("string (date)", "an RFC 3339 full-date");
                let d = self.decode_temporal(c, spec, what, parse_date)?;
                d.map(|d| v.push(d)).is_some()
            }
            Data::Time(v, spec) => {
                let what = ("string (time)", "an RFC 3339 full-time");
                let t = self.decode_temporal(c, spec, what, parse_time)?;
                t.map(|t| v.push(t)).is_some()
            }
            Data::Uuid(v, spec) => self.decode_uuid(c, v, spec)?,
            Data::Binary(v, spec) => self.decode_binary(c, v, spec)?,
            Data::Struct(s) => {
                if c != b'{' {
                    return self.type_mismatch(c, "object");
                }
                self.decode_struct(s)?;
                self.err.is_none()
            }
            Data::List(l) => {
                if c != b'[' {
                    return self.type_mismatch(c, "array");
                }
                self.decode_list(l)?;
                self.err.is_none()
            }
            Data::Map(m) => {
                if c != b'{' {
                    return self.type_mismatch(c, "object");
                }
                self.decode_map(m)?;
                self.err.is_none()
            }
            // No JSON Schema maps to these (docs/schema-mapping.md): a JSON channel's table has
            // them only as columns its schema versions lack, which are never decoded.
            Data::Float(_) | Data::Fixed(..) | Data::Timestamp(_) => {
                return self.type_mismatch(c, "a value of a type JSON Schema does not map to");
            }
        };
        if appended {
            if let Some(vb) = validity {
                vb.append(true);
            }
        }
        Ok(())
    }

    /// A `boolean` into `b`; `Ok(false)` when the value is not one (error recorded).
    #[inline]
    fn decode_bool(&mut self, c: u8, b: &mut BooleanBufferBuilder) -> Result<bool, SyntaxError> {
        match c {
            b't' => self.r.literal(b"true")?,
            b'f' => self.r.literal(b"false")?,
            _ => return self.type_mismatch(c, "boolean").map(|()| false),
        }
        b.append(c == b't');
        Ok(true)
    }

    /// An `integer` within `min..=max` (the column type `name`'s range) that passes `spec`;
    /// `Ok(None)` when it is refused (error recorded).
    #[inline]
    fn decode_integer(
        &mut self,
        c: u8,
        spec: &IntSpec,
        min: i128,
        max: i128,
        name: &'static str,
    ) -> Result<Option<i128>, SyntaxError> {
        if !is_num_start(c) {
            return self.type_mismatch(c, "integer").map(|()| None);
        }
        let t = self.r.scan_number()?;
        Ok(self.int_value(t, spec, min, max, name))
    }

    /// A `number` into a `double` column; `Ok(false)` when it is refused (error recorded).
    #[inline]
    fn decode_double(
        &mut self,
        c: u8,
        v: &mut Vec<f64>,
        spec: &NumSpec,
    ) -> Result<bool, SyntaxError> {
        if !is_num_start(c) {
            return self.type_mismatch(c, "number").map(|()| false);
        }
        let t = self.r.scan_number()?;
        let buf = self.r.buf;
        let tok = &buf[t.range()];
        let x = parse_f64(tok);
        if !x.is_finite() {
            self.fail(DlqCode::ValueOutOfRange, || {
                "number beyond the range of a double".to_string()
            });
            return Ok(false);
        }
        if !spec.is_empty() && !self.check_num(tok, spec) {
            return Ok(false);
        }
        v.push(x);
        Ok(true)
    }

    /// A `number` into a `decimal` column; `Ok(false)` when it is refused (error recorded).
    #[inline]
    fn decode_decimal(
        &mut self,
        c: u8,
        v: &mut Vec<i128>,
        plan: &DecimalPlan,
    ) -> Result<bool, SyntaxError> {
        if !is_num_start(c) {
            return self.type_mismatch(c, "number").map(|()| false);
        }
        let t = self.r.scan_number()?;
        let buf = self.r.buf;
        let Some(x) = self.decimal_value(&buf[t.range()], plan) else {
            return Ok(false);
        };
        v.push(x);
        Ok(true)
    }

    /// A `string` unescaped straight into `vb`; `Ok(false)` when it is refused (error recorded,
    /// the bytes written are not committed).
    #[inline]
    fn decode_str(&mut self, c: u8, vb: &mut VarBuf, spec: &StrSpec) -> Result<bool, SyntaxError> {
        if c != b'"' {
            return self.type_mismatch(c, "string").map(|()| false);
        }
        let t = self.r.scan_string()?;
        let buf = self.r.buf;
        let start = vb.data.len();
        let raw = &buf[t.range()];
        if t.escaped() {
            unescape(raw, &mut vb.data);
        } else {
            vb.data.extend_from_slice(raw);
        }
        if !spec.is_empty() && !self.check_str(&vb.data[start..], spec) {
            return Ok(false);
        }
        vb.commit();
        Ok(true)
    }

    /// A date, time or date-time string read by `parse`; `what` is (the type expected, the RFC
    /// 3339 production named when it does not parse). `Ok(None)` when it is refused (error
    /// recorded).
    #[inline]
    fn decode_temporal<T>(
        &mut self,
        c: u8,
        spec: &StrSpec,
        what: (&'static str, &'static str),
        parse: impl FnOnce(&[u8]) -> Result<T, TimeError>,
    ) -> Result<Option<T>, SyntaxError> {
        if c != b'"' {
            return self.type_mismatch(c, what.0).map(|()| None);
        }
        match self.with_string(spec, parse)? {
            Some(Ok(value)) => Ok(Some(value)),
            Some(Err(e)) => {
                self.time_error(e, what.1);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    /// A hyphenated uuid string into its 16 bytes; `Ok(false)` when it is refused (error recorded).
    #[inline]
    fn decode_uuid(&mut self, c: u8, v: &mut Vec<u8>, spec: &StrSpec) -> Result<bool, SyntaxError> {
        if c != b'"' {
            return self.type_mismatch(c, "string (uuid)").map(|()| false);
        }
        match self.with_string(spec, parse_uuid)? {
            Some(Some(u)) => {
                v.extend_from_slice(&u);
                Ok(true)
            }
            Some(None) => {
                self.fail(DlqCode::TypeMismatch, || {
                    "not a hyphenated 8-4-4-4-12 uuid".to_string()
                });
                Ok(false)
            }
            None => Ok(false),
        }
    }

    /// A base64 string decoded into `v`; `Ok(false)` when it is refused (error recorded).
    #[inline]
    fn decode_binary(
        &mut self,
        c: u8,
        v: &mut LargeVarBuf,
        spec: &StrSpec,
    ) -> Result<bool, SyntaxError> {
        if c != b'"' {
            return self.type_mismatch(c, "string (base64)").map(|()| false);
        }
        let data = &mut v.data;
        match self.with_string(spec, |b| {
            base64::engine::general_purpose::STANDARD.decode_vec(b, data)
        })? {
            Some(Ok(())) => {
                v.commit();
                Ok(true)
            }
            Some(Err(_)) => {
                self.fail(DlqCode::TypeMismatch, || {
                    "not base64 (RFC 4648 §4, padded, no whitespace)".to_string()
                });
                Ok(false)
            }
            None => Ok(false),
        }
    }

    /// Scans the string at the cursor, unescapes it if needed, checks `spec`, and applies `f` to its
    /// bytes. `None` when a string check failed (error recorded).
    #[inline]
    fn with_string<T>(
        &mut self,
        spec: &StrSpec,
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, SyntaxError> {
        let t = self.r.scan_string()?;
        let buf = self.r.buf;
        let raw = &buf[t.range()];
        let mut tmp = std::mem::take(&mut self.s.strbuf);
        let out = {
            let bytes: &[u8] = if t.escaped() {
                tmp.clear();
                unescape(raw, &mut tmp);
                &tmp
            } else {
                raw
            };
            if !spec.is_empty() && !self.check_str(bytes, spec) {
                None
            } else {
                Some(f(bytes))
            }
        };
        self.s.strbuf = tmp;
        Ok(out)
    }

    #[cold]
    fn time_error(&mut self, e: TimeError, what: &'static str) {
        match e {
            TimeError::Format => self.fail(DlqCode::TypeMismatch, || format!("not {what}")),
            TimeError::Range => self.fail(DlqCode::ValueOutOfRange, || {
                "outside years 0000-9999 after normalization to UTC".to_string()
            }),
        }
    }

    /// String keywords; records an error and returns false when one fails.
    fn check_str(&mut self, b: &[u8], spec: &StrSpec) -> bool {
        if spec.min_len.is_some() || spec.max_len.is_some() {
            let n = char_count(b);
            if let Some(min) = spec.min_len {
                if n < min {
                    self.fail(DlqCode::ValueOutOfRange, || {
                        format!("string shorter than minLength {min}")
                    });
                    return false;
                }
            }
            if let Some(max) = spec.max_len {
                if n > max {
                    self.fail(DlqCode::ValueOutOfRange, || {
                        format!("string longer than maxLength {max}")
                    });
                    return false;
                }
            }
        }
        let s = std::str::from_utf8(b).unwrap_or("");
        if let Some(re) = &spec.pattern {
            if !re.is_match(s) {
                self.fail(DlqCode::ValueOutOfRange, || {
                    format!(
                        "string does not match pattern {:?}",
                        spec.pattern_text.as_deref().unwrap_or("")
                    )
                });
                return false;
            }
        }
        // The value is a string either way: a string not in its format is out of range. (A
        // date-time out of years 0000-9999 after normalization is still in the format.)
        let in_format = match spec.format {
            None => true,
            Some(StrFormat::Ipv4) => s.parse::<std::net::Ipv4Addr>().is_ok(),
            Some(StrFormat::Ipv6) => s.parse::<std::net::Ipv6Addr>().is_ok(),
            Some(StrFormat::DateTime) => !matches!(parse_date_time(b), Err(TimeError::Format)),
            Some(StrFormat::Date) => !matches!(parse_date(b), Err(TimeError::Format)),
            Some(StrFormat::Time) => !matches!(parse_time(b), Err(TimeError::Format)),
            Some(StrFormat::Uuid) => parse_uuid(b).is_some(),
        };
        if !in_format {
            let format = spec.format;
            self.fail(DlqCode::ValueOutOfRange, || {
                format!(
                    "string not in format {}",
                    format.map(StrFormat::name).unwrap_or("")
                )
            });
        }
        in_format
    }

    /// Bounds of a number given by its token; records an error and returns false when one fails.
    fn check_num(&mut self, tok: &[u8], spec: &NumSpec) -> bool {
        let (neg, exp) = normalize_number(tok, &mut self.s.digits);
        self.check_num_parts(neg, exp, spec)
    }

    fn check_num_parts(&mut self, neg: bool, exp: i64, spec: &NumSpec) -> bool {
        let digits = std::mem::take(&mut self.s.digits);
        let ok = (|| {
            let v = (neg, &digits[..], exp);
            for b in &spec.lower {
                let o = cmp_parts(v, b.value.parts());
                if o.is_lt() || (b.exclusive && o.is_eq()) {
                    let t = b.value.to_plain_string();
                    let ex = b.exclusive;
                    self.fail(DlqCode::ValueOutOfRange, || {
                        format!("below {}minimum {t}", if ex { "exclusive " } else { "" })
                    });
                    return false;
                }
            }
            for b in &spec.upper {
                let o = cmp_parts(v, b.value.parts());
                if o.is_gt() || (b.exclusive && o.is_eq()) {
                    let t = b.value.to_plain_string();
                    let ex = b.exclusive;
                    self.fail(DlqCode::ValueOutOfRange, || {
                        format!("above {}maximum {t}", if ex { "exclusive " } else { "" })
                    });
                    return false;
                }
            }
            if let Some(m) = &spec.multiple_of {
                if !m.divides(&digits, exp) {
                    let t = m.text.clone();
                    self.fail(DlqCode::ValueOutOfRange, || {
                        format!("not a multiple of {t}")
                    });
                    return false;
                }
            }
            true
        })();
        self.s.digits = digits;
        ok
    }

    /// An integer value, exact; `None` with an error recorded when not allowed.
    fn int_value(
        &mut self,
        t: NumTok,
        spec: &IntSpec,
        col_lo: i128,
        col_hi: i128,
        col: &'static str,
    ) -> Option<i128> {
        let tok = &self.r.buf[t.range()];
        let v: i128 = if t.literal() && tok.len() <= 19 {
            let (neg, d) = match tok.split_first() {
                Some((b'-', rest)) => (true, rest),
                _ => (false, tok),
            };
            // At most 19 digits: fits u64.
            let mut v: u64 = 0;
            for &c in d {
                v = v * 10 + u64::from(c - b'0');
            }
            if neg {
                -i128::from(v)
            } else {
                i128::from(v)
            }
        } else {
            if !t.literal() && self.draft == Draft::Draft04 {
                self.fail(DlqCode::TypeMismatch, || {
                    "expected integer, got a number that is not an integer literal (draft-04)"
                        .to_string()
                });
                return None;
            }
            let (neg, exp) = normalize_number(tok, &mut self.s.digits);
            if exp < 0 {
                self.fail(DlqCode::TypeMismatch, || {
                    "expected integer, got a number with a fractional part".to_string()
                });
                return None;
            }
            let n = self.s.digits.len() as i64 + exp;
            let mut v: Option<i128> = (n <= 38).then_some(0);
            for &c in &self.s.digits {
                v = v.and_then(|v| v.checked_mul(10)?.checked_add(i128::from(c - b'0')));
            }
            for _ in 0..exp.clamp(0, 40) {
                v = v.and_then(|v| v.checked_mul(10));
            }
            match v {
                Some(v) if neg => -v,
                Some(v) => v,
                None => {
                    self.fail(DlqCode::ValueOutOfRange, || {
                        format!("integer out of range for {col}")
                    });
                    return None;
                }
            }
        };
        if v < col_lo || v > col_hi {
            self.fail(DlqCode::ValueOutOfRange, || {
                format!("integer out of range for {col}")
            });
            return None;
        }
        if v < spec.lo {
            let lo = spec.lo;
            self.fail(DlqCode::ValueOutOfRange, || format!("below minimum {lo}"));
            return None;
        }
        if v > spec.hi {
            let hi = spec.hi;
            self.fail(DlqCode::ValueOutOfRange, || format!("above maximum {hi}"));
            return None;
        }
        if let Some(m) = &spec.multiple_of {
            if !m.divides_int(v) {
                let t = m.text.clone();
                self.fail(DlqCode::ValueOutOfRange, || {
                    format!("not a multiple of {t}")
                });
                return None;
            }
        }
        Some(v)
    }

    /// A decimal(precision, scale) value, exact; `None` with an error recorded when not allowed.
    fn decimal_value(&mut self, tok: &[u8], plan: &DecimalPlan) -> Option<i128> {
        let scale = plan.scale;
        // Fast path: `-?digits(.digits)?` with at most `scale` fractional digits, ≤ 30 digits.
        if plan.bounds.is_empty() && plan.precision == 38 && tok.len() <= 40 {
            if let Some(v) = plain_decimal(tok, scale) {
                let ok = match plan.multiple {
                    DecMultiple::Implied => true,
                    DecMultiple::Unscaled(m) => v % m == 0,
                    DecMultiple::OnlyZero => v == 0,
                };
                if ok {
                    return Some(v);
                }
            }
        }
        let (neg, exp) = normalize_number(tok, &mut self.s.digits);
        let shift = exp + i64::from(scale);
        let nd = self.s.digits.len() as i64;
        if nd > 0 && shift < 0 {
            self.fail(DlqCode::ValueOutOfRange, || {
                format!("more fractional digits than the column's scale {scale}")
            });
            return None;
        }
        if nd > 0 && nd + shift > i64::from(plan.precision) {
            let p = plan.precision;
            self.fail(DlqCode::ValueOutOfRange, || {
                format!("more than {p} digits for decimal({p})")
            });
            return None;
        }
        if !plan.bounds.is_empty() && !self.check_num_parts(neg, exp, &plan.bounds) {
            return None;
        }
        let mut v: i128 = 0;
        for &c in &self.s.digits {
            v = v * 10 + i128::from(c - b'0');
        }
        if nd > 0 {
            for _ in 0..shift {
                v *= 10;
            }
        }
        let ok = match plan.multiple {
            DecMultiple::Implied => true,
            DecMultiple::Unscaled(m) => v % m == 0,
            DecMultiple::OnlyZero => v == 0,
        };
        if !ok {
            self.fail(DlqCode::ValueOutOfRange, || {
                "not a multiple of multipleOf".to_string()
            });
            return None;
        }
        Some(if neg { -v } else { v })
    }

    /// An enum value: appends the member's text to `out`; `Ok(false)` with an error recorded when
    /// the value is not a member.
    fn decode_enum(
        &mut self,
        c: u8,
        out: &mut Vec<u8>,
        spec: &super::column::EnumPlan,
    ) -> Result<bool, SyntaxError> {
        if let Some(ty) = spec.ty {
            let allowed = match ty {
                JsonType::String => c == b'"',
                JsonType::Boolean => c == b't' || c == b'f',
                JsonType::Number | JsonType::Integer => is_num_start(c),
                JsonType::Object => c == b'{',
                JsonType::Array => c == b'[',
                JsonType::Null => false,
            };
            if !allowed {
                self.type_mismatch(c, ty.name())?;
                return Ok(false);
            }
        }
        let buf = self.r.buf;
        let found: Option<usize> = match c {
            b'"' => {
                let t = self.r.scan_string()?;
                let raw = &buf[t.range()];
                let mut tmp = std::mem::take(&mut self.s.strbuf);
                let bytes: &[u8] = if t.escaped() {
                    tmp.clear();
                    unescape(raw, &mut tmp);
                    &tmp
                } else {
                    raw
                };
                let f = spec
                    .members
                    .iter()
                    .position(|m| matches!(m, EnumMember::Str(s) if s.as_bytes() == bytes));
                let ok = f.is_none()
                    || spec.str_spec.is_empty()
                    || self.check_str(bytes, &spec.str_spec);
                self.s.strbuf = tmp;
                if !ok {
                    return Ok(false);
                }
                f
            }
            b't' | b'f' => {
                let b = c == b't';
                self.r.literal(if b { b"true" } else { b"false" })?;
                spec.members
                    .iter()
                    .position(|m| matches!(m, EnumMember::Bool(x) if *x == b))
            }
            c if is_num_start(c) => {
                let t = self.r.scan_number()?;
                let (neg, exp) = normalize_number(&buf[t.range()], &mut self.s.digits);
                let integer = match self.draft {
                    Draft::Draft04 => t.literal(),
                    Draft::Draft07 => exp >= 0,
                };
                if spec.ty == Some(JsonType::Integer) && !integer {
                    self.fail(DlqCode::TypeMismatch, || {
                        "expected integer, got a number that is not an integer".to_string()
                    });
                    return Ok(false);
                }
                let digits = &self.s.digits;
                spec.members.iter().position(|m| match m {
                    EnumMember::Num { value, .. } => {
                        cmp_parts((neg, digits, exp), value.parts()).is_eq()
                    }
                    _ => false,
                })
            }
            b'{' | b'[' => {
                let start = self.r.pos;
                self.skip_value()?;
                let end = self.r.pos;
                match serde_json::from_slice::<serde_json::Value>(&buf[start..end]) {
                    Ok(v) => spec.members.iter().position(|m| match m {
                        EnumMember::Other { value, .. } => json_equal(value, &v),
                        _ => false,
                    }),
                    Err(_) => None,
                }
            }
            _ => {
                self.skip_value()?;
                None
            }
        };
        match found.and_then(|i| spec.members.get(i)) {
            Some(EnumMember::Str(s)) => out.extend_from_slice(s.as_bytes()),
            Some(EnumMember::Num { text, .. }) | Some(EnumMember::Other { text, .. }) => {
                out.extend_from_slice(text.as_bytes())
            }
            Some(EnumMember::Bool(b)) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Some(EnumMember::Null) | None => {
                self.fail(DlqCode::ValueOutOfRange, || {
                    "not one of the enum values".to_string()
                });
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// A JSON object into a struct (the cursor is at `{`).
    pub fn decode_struct(&mut self, s: &mut StructCol) -> Res {
        self.r.pos += 1;
        self.enter()?;
        let d = self.depth;
        self.s.keysets[d].clear();
        let n = s.children.len();
        let mut seen = Seen::new(n);
        let mut num_keys: u64 = 0;
        let n_fields = s.children.len();
        // The field expected next: records of one producer keep one key order, learned as we go.
        let mut prev = n_fields;
        let mut hint = s.next_after[prev];
        let buf = self.r.buf;
        if self.r.peek() == Some(b'}') {
            self.r.pos += 1;
        } else {
            loop {
                if self.r.peek() != Some(b'"') {
                    return Err(self.r.err("expected a key"));
                }
                num_keys += 1;
                // Fast path: the raw key is exactly the expected field's (plain) name.
                let p = self.r.pos + 1;
                let fast = match s.plain_names.get(hint) {
                    Some(Some(pat)) if pat.matches(buf, p) => Some(pat.name_len()),
                    _ => None,
                };
                let (idx, raw, escaped) = if let Some(len) = fast {
                    let e = p + len;
                    self.r.pos = e + 1;
                    (Some(hint), &buf[p..e], false)
                } else {
                    let k = self.r.scan_string()?;
                    let raw = &buf[k.range()];
                    let idx = if k.escaped() {
                        self.s.keybuf.clear();
                        unescape(raw, &mut self.s.keybuf);
                        s.lookup(&self.s.keybuf, hint)
                    } else {
                        s.lookup(raw, hint)
                    };
                    (idx, raw, k.escaped())
                };
                self.r.expect(b':', "expected ':'")?;
                if let Some(i) = idx {
                    if s.next_after[prev] != i {
                        s.next_after[prev] = i;
                    }
                    prev = i;
                    hint = s.next_after[i];
                }
                match idx {
                    Some(i) => {
                        if seen.test_and_set(i) {
                            return Err(self.r.err("duplicate key in an object"));
                        }
                        let child = &mut s.children[i];
                        self.decode(child)?;
                        if self.pending == self.depth {
                            let name_id = child.meta.name_id as usize;
                            let names = self.names;
                            self.prepend(names.get(name_id).map(|b| &**b).unwrap_or(""));
                        }
                    }
                    None => {
                        self.s.keysets[d].push(raw, escaped);
                        if s.spec_additional_forbid && self.err.is_none() {
                            let mut key = Vec::new();
                            if escaped {
                                unescape(raw, &mut key);
                            } else {
                                key.extend_from_slice(raw);
                            }
                            let key = String::from_utf8_lossy(&key).into_owned();
                            self.fail_at(
                                DlqCode::ValueOutOfRange,
                                Some(&key),
                                self.depth - 1,
                                || {
                                    "property not allowed (additionalProperties is false)"
                                        .to_string()
                                },
                            );
                        }
                        self.skip_value()?;
                    }
                }
                match self.r.peek() {
                    Some(b',') => self.r.pos += 1,
                    Some(b'}') => {
                        self.r.pos += 1;
                        break;
                    }
                    _ => return Err(self.r.err("expected ',' or '}'")),
                }
            }
            if self.s.keysets[d].has_duplicates() {
                return Err(self.r.err("duplicate key in an object"));
            }
        }
        self.depth -= 1;
        if self.err.is_some() {
            return Ok(());
        }
        for i in 0..if seen.all(n) { 0 } else { n } {
            if seen.get(i) {
                continue;
            }
            let child = &mut s.children[i];
            if child.meta.required {
                let (code, what) = if child.meta.is_partition {
                    (
                        DlqCode::MissingPartitionValue,
                        "the partition field is missing",
                    )
                } else {
                    (DlqCode::MissingRequiredField, "required field is missing")
                };
                let names = self.names;
                let name = names.get(child.meta.name_id as usize).map(|b| &**b);
                self.fail_at(code, name, self.depth, || what.to_string());
                return Ok(());
            }
            child.push_null();
        }
        if let Some(min) = s.min_props {
            if num_keys < min {
                self.fail(DlqCode::ValueOutOfRange, || {
                    format!("fewer properties than minProperties {min}")
                });
                return Ok(());
            }
        }
        if let Some(max) = s.max_props {
            if num_keys > max {
                self.fail(DlqCode::ValueOutOfRange, || {
                    format!("more properties than maxProperties {max}")
                });
                return Ok(());
            }
        }
        s.len += 1;
        Ok(())
    }

    fn decode_list(&mut self, l: &mut ListCol) -> Res {
        self.r.pos += 1;
        self.enter()?;
        let mut count: u64 = 0;
        if self.r.peek() == Some(b']') {
            self.r.pos += 1;
        } else {
            loop {
                self.decode(&mut l.child)?;
                if self.pending == self.depth {
                    self.prepend(&count.to_string());
                }
                count += 1;
                match self.r.peek() {
                    Some(b',') => self.r.pos += 1,
                    Some(b']') => {
                        self.r.pos += 1;
                        break;
                    }
                    _ => return Err(self.r.err("expected ',' or ']'")),
                }
            }
        }
        self.depth -= 1;
        if self.err.is_some() {
            return Ok(());
        }
        if let Some(min) = l.min_items {
            if count < min {
                self.fail(DlqCode::ValueOutOfRange, || {
                    format!("fewer items than minItems {min}")
                });
                return Ok(());
            }
        }
        if let Some(max) = l.max_items {
            if count > max {
                self.fail(DlqCode::ValueOutOfRange, || {
                    format!("more items than maxItems {max}")
                });
                return Ok(());
            }
        }
        l.offsets.push(l.child.len() as i32);
        Ok(())
    }

    fn decode_map(&mut self, m: &mut MapCol) -> Res {
        self.r.pos += 1;
        self.enter()?;
        let first = m.keys.len();
        let buf = self.r.buf;
        if self.r.peek() == Some(b'}') {
            self.r.pos += 1;
        } else {
            loop {
                if self.r.peek() != Some(b'"') {
                    return Err(self.r.err("expected a key"));
                }
                let k = self.r.scan_string()?;
                self.r.expect(b':', "expected ':'")?;
                let raw = &buf[k.range()];
                let ks = m.keys.data.len();
                if k.escaped() {
                    unescape(raw, &mut m.keys.data);
                } else {
                    m.keys.data.extend_from_slice(raw);
                }
                m.keys.commit();
                self.decode(&mut m.values)?;
                if self.pending == self.depth {
                    let key = String::from_utf8_lossy(&m.keys.data[ks..]).into_owned();
                    self.prepend(&key);
                }
                match self.r.peek() {
                    Some(b',') => self.r.pos += 1,
                    Some(b'}') => {
                        self.r.pos += 1;
                        break;
                    }
                    _ => return Err(self.r.err("expected ',' or '}'")),
                }
            }
            let offs = &m.keys.offsets[first..];
            self.s.spans.clear();
            for w in offs.windows(2) {
                self.s.spans.push((w[0] as u32, w[1] as u32));
            }
            if has_duplicate_spans(&m.keys.data, &mut self.s.spans) {
                return Err(self.r.err("duplicate key in an object"));
            }
        }
        self.depth -= 1;
        if self.err.is_some() {
            return Ok(());
        }
        let count = (m.keys.len() - first) as u64;
        if let Some(min) = m.min_props {
            if count < min {
                self.fail(DlqCode::ValueOutOfRange, || {
                    format!("fewer properties than minProperties {min}")
                });
                return Ok(());
            }
        }
        if let Some(max) = m.max_props {
            if count > max {
                self.fail(DlqCode::ValueOutOfRange, || {
                    format!("more properties than maxProperties {max}")
                });
                return Ok(());
            }
        }
        m.offsets.push(m.keys.len() as i32);
        Ok(())
    }
}

/// A JSON number token as the nearest double (round-half-even, as `str::parse::<f64>`), ±∞ when
/// beyond the range. Fast path (Clinger): at most 15 significant digits and a power of ten up to
/// 10^22 are both exact doubles, so one multiplication or division rounds correctly.
#[inline]
fn parse_f64(tok: &[u8]) -> f64 {
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    let (neg, body) = match tok.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, tok),
    };
    let mut mant: u64 = 0;
    let mut sig = 0u32;
    let mut frac = 0i32;
    let mut seen_dot = false;
    let mut simple = true;
    for &c in body {
        match c {
            b'0'..=b'9' => {
                if mant == 0 && c == b'0' {
                    // leading zero: not significant
                } else {
                    sig += 1;
                }
                mant = mant.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
                if seen_dot {
                    frac += 1;
                }
            }
            b'.' => seen_dot = true,
            _ => {
                simple = false; // exponent: take the general path
                break;
            }
        }
    }
    if simple && sig <= 15 && frac <= 22 {
        let m = mant as f64;
        let v = if frac == 0 {
            m
        } else {
            m / POW10[frac as usize]
        };
        return if neg { -v } else { v };
    }
    std::str::from_utf8(tok)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(f64::INFINITY)
}

/// The unscaled value of a plain decimal literal (no exponent, at most `scale` fractional digits,
/// at most 31 characters), or `None` to take the general path.
#[inline]
fn plain_decimal(tok: &[u8], scale: u32) -> Option<i128> {
    let (neg, body) = match tok.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, tok),
    };
    let mut v: i128 = 0;
    let mut frac: Option<u32> = None;
    let mut digits: u32 = 0;
    for &c in body {
        match c {
            b'0'..=b'9' => {
                v = v * 10 + i128::from(c - b'0');
                digits += 1;
                if let Some(f) = &mut frac {
                    *f += 1;
                }
            }
            b'.' if frac.is_none() => frac = Some(0),
            _ => return None,
        }
    }
    let f = frac.unwrap_or(0);
    // Keeps |v| < 10^38 (decimal(38) precision) and the arithmetic in range.
    if f > scale || digits + (scale - f) > 38 {
        return None;
    }
    for _ in f..scale {
        v *= 10;
    }
    Some(if neg { -v } else { v })
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, either case → 16 bytes.
fn parse_uuid(b: &[u8]) -> Option<[u8; 16]> {
    if b.len() != 36 {
        return None;
    }
    let mut out = [0u8; 16];
    let mut n = 0;
    let mut i = 0;
    while i < 36 {
        if matches!(i, 8 | 13 | 18 | 23) {
            if b[i] != b'-' {
                return None;
            }
            i += 1;
            continue;
        }
        let hi = hex(b[i])?;
        let lo = hex(*b.get(i + 1)?)?;
        out[n] = hi << 4 | lo;
        n += 1;
        i += 2;
    }
    Some(out)
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// JSON equality as JSON Schema defines it for `enum` (numbers by value, objects unordered).
fn json_equal(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as V;
    match (a, b) {
        (V::Number(x), V::Number(y)) => {
            let (mut dx, mut dy) = (Vec::new(), Vec::new());
            let sx = x.to_string();
            let sy = y.to_string();
            let px = normalize_number(sx.as_bytes(), &mut dx);
            let py = normalize_number(sy.as_bytes(), &mut dy);
            cmp_parts((px.0, &dx, px.1), (py.0, &dy, py.1)).is_eq()
        }
        (V::Array(x), V::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (V::Object(x), V::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).map(|w| json_equal(v, w)).unwrap_or(false))
        }
        _ => a == b,
    }
}

//! Exact decimal numbers, read from the text of a JSON number (RFC 8259 §6), never through `f64`.
//!
//! Used at setup for the numeric keywords of a JSON Schema (`minimum`, `multipleOf`, …) and on the hot
//! path by the converter for bounds, `multipleOf` and decimal columns. A number is kept as a sign, its
//! significant digits (ASCII, no leading or trailing zeros; empty for zero) and a power-of-ten exponent:
//! `value = (-1)^neg × digits × 10^exp`. Comparisons and divisibility are exact for any magnitude.

use std::cmp::Ordering;

/// Bound on exponents so that adding a digit count never overflows: numbers beyond `10^±EXP_CLAMP` are
/// far outside every Iceberg type, and clamping keeps their order.
const EXP_CLAMP: i64 = 1 << 40;

/// Checks the JSON number grammar (`-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`) on the whole
/// of `tok`. Returns whether it is an integer literal (no fraction, no exponent).
pub(crate) fn check_number_grammar(tok: &[u8]) -> Option<bool> {
    let mut i = 0;
    if tok.first() == Some(&b'-') {
        i += 1;
    }
    match tok.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            while matches!(tok.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
        }
        _ => return None,
    }
    let mut literal = true;
    if tok.get(i) == Some(&b'.') {
        literal = false;
        i += 1;
        let start = i;
        while matches!(tok.get(i), Some(b'0'..=b'9')) {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    if matches!(tok.get(i), Some(b'e' | b'E')) {
        literal = false;
        i += 1;
        if matches!(tok.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let start = i;
        while matches!(tok.get(i), Some(b'0'..=b'9')) {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    (i == tok.len()).then_some(literal)
}

/// Normalizes a grammatically valid JSON number token: fills `digits` with its significant digits and
/// returns `(negative, exponent)`. Zero gives empty digits, `(false, 0)`.
pub(crate) fn normalize_number(tok: &[u8], digits: &mut Vec<u8>) -> (bool, i64) {
    digits.clear();
    let mut i = 0;
    let neg = tok.first() == Some(&b'-');
    if neg {
        i += 1;
    }
    let mut frac_len: i64 = 0;
    let mut in_frac = false;
    while let Some(&c) = tok.get(i) {
        match c {
            b'0'..=b'9' => {
                if !(digits.is_empty() && c == b'0') {
                    digits.push(c);
                }
                if in_frac {
                    frac_len += 1;
                }
            }
            b'.' => in_frac = true,
            _ => break,
        }
        i += 1;
    }
    let mut exp: i64 = 0;
    if matches!(tok.get(i), Some(b'e' | b'E')) {
        i += 1;
        let eneg = tok.get(i) == Some(&b'-');
        if matches!(tok.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        while let Some(&c) = tok.get(i) {
            if !c.is_ascii_digit() {
                break;
            }
            exp = (exp * 10 + i64::from(c - b'0')).min(EXP_CLAMP);
            i += 1;
        }
        if eneg {
            exp = -exp;
        }
    }
    if digits.is_empty() {
        return (false, 0);
    }
    // Leading zeros were never pushed (a leading "0." contributes only to frac_len).
    let mut exp = exp - frac_len;
    while digits.last() == Some(&b'0') {
        digits.pop();
        exp += 1;
    }
    (neg, exp.clamp(-EXP_CLAMP, EXP_CLAMP))
}

/// Compares two normalized numbers `(neg, digits, exp)` exactly.
pub(crate) fn cmp_parts(a: (bool, &[u8], i64), b: (bool, &[u8], i64)) -> Ordering {
    let (an, ad, ae) = a;
    let (bn, bd, be) = b;
    let a_zero = ad.is_empty();
    let b_zero = bd.is_empty();
    let sign = |zero: bool, neg: bool| -> i8 {
        if zero {
            0
        } else if neg {
            -1
        } else {
            1
        }
    };
    let (sa, sb) = (sign(a_zero, an), sign(b_zero, bn));
    if sa != sb {
        return sa.cmp(&sb);
    }
    if sa == 0 {
        return Ordering::Equal;
    }
    // Same sign, both non-zero: compare magnitudes, then flip for negatives.
    let a_adj = ad.len() as i64 + ae;
    let b_adj = bd.len() as i64 + be;
    let mag = a_adj.cmp(&b_adj).then_with(|| ad.cmp(bd));
    if sa < 0 {
        mag.reverse()
    } else {
        mag
    }
}

/// An exact decimal number, owned (used for schema keywords).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dec {
    /// Negative (never set for zero).
    pub neg: bool,
    /// Significant digits, ASCII, no leading or trailing zeros; empty for zero.
    pub digits: Vec<u8>,
    /// Power of ten applied to `digits`.
    pub exp: i64,
}

impl Dec {
    /// Parses the text of a JSON number exactly; `None` when it is not one.
    pub fn parse(text: &str) -> Option<Dec> {
        check_number_grammar(text.as_bytes())?;
        let mut digits = Vec::new();
        let (neg, exp) = normalize_number(text.as_bytes(), &mut digits);
        Some(Dec { neg, digits, exp })
    }

    /// Reads a `serde_json` number: integers exactly, doubles through their shortest round-trip text
    /// (so `0.01` in a schema is the decimal 0.01, not the binary double nearest to it).
    pub fn from_json(n: &serde_json::Number) -> Option<Dec> {
        Dec::parse(&n.to_string())
    }

    /// The parts as a tuple for [`cmp_parts`].
    pub(crate) fn parts(&self) -> (bool, &[u8], i64) {
        (self.neg, &self.digits, self.exp)
    }

    /// Zero.
    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// Number of fractional digits in plain decimal notation (0.010 → 2, 1e-10 → 10, 25 → 0).
    pub fn scale(&self) -> u64 {
        if self.exp < 0 {
            self.exp.unsigned_abs()
        } else {
            0
        }
    }

    /// Number of digits before the decimal point (0 for |x| < 1).
    fn int_digits(&self) -> i64 {
        (self.digits.len() as i64 + self.exp).max(0)
    }

    /// The integer part as i128 (toward zero), saturating beyond ±10^38.
    fn trunc_i128(&self) -> i128 {
        if self.int_digits() > 38 {
            return if self.neg { i128::MIN } else { i128::MAX };
        }
        let keep = self.int_digits() as usize;
        let mut v: i128 = 0;
        for k in 0..keep {
            let d = self
                .digits
                .get(k)
                .map(|c| i128::from(c - b'0'))
                .unwrap_or(0);
            v = v * 10 + d;
        }
        if self.neg {
            -v
        } else {
            v
        }
    }

    /// Whether it has a non-zero fractional part.
    fn has_fraction(&self) -> bool {
        self.exp < 0
    }

    /// Smallest integer ≥ self, saturating to the i128 range.
    pub fn ceil_i128(&self) -> i128 {
        let t = self.trunc_i128();
        if self.has_fraction() && !self.neg {
            t.saturating_add(1)
        } else {
            t
        }
    }

    /// Largest integer ≤ self, saturating to the i128 range.
    pub fn floor_i128(&self) -> i128 {
        let t = self.trunc_i128();
        if self.has_fraction() && self.neg {
            t.saturating_sub(1)
        } else {
            t
        }
    }

    /// The digits as u64 when they fit (used for `multipleOf` divisors).
    pub(crate) fn digits_u64(&self) -> Option<u64> {
        if self.digits.len() > 20 {
            return None;
        }
        let mut v: u64 = 0;
        for &c in &self.digits {
            v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
        }
        Some(v)
    }

    /// The number as canonical JSON text (RFC 8785 §3.2.2.3, i.e. ECMAScript `Number::toString` of
    /// these digits): `1`, `2.5`, `1e+21`, `1e-7`, `0.000001`; zero is `0`.
    pub fn to_canonical_json(&self) -> String {
        if self.digits.is_empty() {
            return "0".to_string();
        }
        let d = std::str::from_utf8(&self.digits).unwrap_or("0");
        let k = d.len() as i64;
        let n = k + self.exp; // value = 0.d × 10^n
        let mut s = String::new();
        if self.neg {
            s.push('-');
        }
        if k <= n && n <= 21 {
            s.push_str(d);
            for _ in 0..(n - k) {
                s.push('0');
            }
        } else if 0 < n && n <= 21 {
            s.push_str(&d[..n as usize]);
            s.push('.');
            s.push_str(&d[n as usize..]);
        } else if -6 < n && n <= 0 {
            s.push_str("0.");
            for _ in 0..(-n) {
                s.push('0');
            }
            s.push_str(d);
        } else {
            s.push_str(&d[..1]);
            if k > 1 {
                s.push('.');
                s.push_str(&d[1..]);
            }
            s.push('e');
            s.push(if n > 0 { '+' } else { '-' });
            s.push_str(&(n - 1).abs().to_string());
        }
        s
    }

    /// Plain decimal text, e.g. `0.01`, `-25`, `1000`.
    pub fn to_plain_string(&self) -> String {
        if self.digits.is_empty() {
            return "0".to_string();
        }
        let mut s = String::new();
        if self.neg {
            s.push('-');
        }
        let d = std::str::from_utf8(&self.digits).unwrap_or("0");
        if self.exp >= 0 {
            s.push_str(d);
            for _ in 0..self.exp.min(400) {
                s.push('0');
            }
        } else {
            let frac = self.exp.unsigned_abs() as usize;
            if frac >= d.len() {
                s.push_str("0.");
                for _ in 0..(frac - d.len()) {
                    s.push('0');
                }
                s.push_str(d);
            } else {
                s.push_str(&d[..d.len() - frac]);
                s.push('.');
                s.push_str(&d[d.len() - frac..]);
            }
        }
        s
    }
}

/// A `multipleOf` divisor `m = digits × 10^exp` (digits < 2^64 since it comes from a JSON Schema
/// number read by `serde_json`: a u64/i64 or a double's shortest text of at most 17 digits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultipleOf {
    /// Significant digits of the divisor as an integer (≥ 1).
    pub m: u64,
    /// Power of ten.
    pub exp: i64,
    /// The divisor as written, for messages.
    pub text: String,
}

impl MultipleOf {
    /// From a positive exact decimal; `None` when zero, negative or too many digits.
    pub fn new(d: &Dec) -> Option<MultipleOf> {
        if d.neg || d.is_zero() {
            return None;
        }
        Some(MultipleOf {
            m: d.digits_u64()?,
            exp: d.exp,
            text: d.to_plain_string(),
        })
    }

    /// Whether the normalized number `digits × 10^exp` (sign irrelevant) is an exact multiple.
    pub fn divides(&self, digits: &[u8], exp: i64) -> bool {
        if digits.is_empty() {
            return true; // zero is a multiple of everything
        }
        // v = D·10^a, m = M·10^b. If a < b, D (no trailing zeros) would need 10^(b-a) as a factor.
        if exp < self.exp {
            return false;
        }
        let k = (exp - self.exp) as u64;
        let m = u128::from(self.m);
        let mut r: u128 = 0;
        for &c in digits {
            r = (r * 10 + u128::from(c - b'0')) % m;
        }
        mul_mod(r, pow_mod(10, k, m), m) == 0
    }

    /// Whether the integer `v` is a multiple.
    pub fn divides_int(&self, v: i128) -> bool {
        let mut buf = [0u8; 40];
        let digits = int_digits(v, &mut buf);
        // Normalize: strip trailing zeros.
        let mut end = digits.len();
        let mut exp = 0i64;
        while end > 0 && digits[end - 1] == b'0' {
            end -= 1;
            exp += 1;
        }
        self.divides(&digits[..end], exp)
    }
}

/// Decimal digits of |v| (no sign) written into `buf`; empty for zero.
pub(crate) fn int_digits(v: i128, buf: &mut [u8; 40]) -> &[u8] {
    let mut u = v.unsigned_abs();
    let mut i = buf.len();
    while u > 0 && i > 0 {
        i -= 1;
        buf[i] = b'0' + (u % 10) as u8;
        u /= 10;
    }
    &buf[i..]
}

fn mul_mod(a: u128, b: u128, m: u128) -> u128 {
    // a, b < m ≤ 2^64, so a·b < 2^128.
    (a % m) * (b % m) % m
}

fn pow_mod(mut base: u128, mut e: u64, m: u128) -> u128 {
    let mut acc = 1 % m;
    base %= m;
    while e > 0 {
        if e & 1 == 1 {
            acc = mul_mod(acc, base, m);
        }
        base = mul_mod(base, base, m);
        e >>= 1;
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Dec {
        Dec::parse(s).unwrap()
    }

    #[test]
    fn normalizes_digits_and_exponent() {
        assert_eq!(
            d("0.010"),
            Dec {
                neg: false,
                digits: b"1".to_vec(),
                exp: -2
            }
        );
        assert_eq!(d("1e-10").scale(), 10);
        assert_eq!(d("0.010").scale(), 2);
        assert_eq!(d("5").scale(), 0);
        assert_eq!(d("2.5E1").scale(), 0);
        assert_eq!(d("-0.0"), d("0"));
        assert_eq!(
            d("1000"),
            Dec {
                neg: false,
                digits: b"1".to_vec(),
                exp: 3
            }
        );
        assert!(Dec::parse("01").is_none());
        assert!(Dec::parse("1.").is_none());
        assert!(Dec::parse(".5").is_none());
        assert!(Dec::parse("1e").is_none());
        assert!(Dec::parse("+1").is_none());
    }

    #[test]
    fn compares_exactly() {
        let c = |a: &str, b: &str| cmp_parts(d(a).parts(), d(b).parts());
        assert_eq!(c("0.30000000000000001", "0.3"), Ordering::Greater);
        assert_eq!(c("-1", "1"), Ordering::Less);
        assert_eq!(c("-2", "-1"), Ordering::Less);
        assert_eq!(c("1e2", "100.0"), Ordering::Equal);
        assert_eq!(c("0", "-0.0"), Ordering::Equal);
        assert_eq!(c("99", "100"), Ordering::Less);
        assert_eq!(c("1e400", "1e399"), Ordering::Greater);
    }

    #[test]
    fn multiple_of_is_exact() {
        let m = MultipleOf::new(&d("0.01")).unwrap();
        let dv = d("4.02");
        assert!(m.divides(&dv.digits, dv.exp));
        let dv = d("4.025");
        assert!(!m.divides(&dv.digits, dv.exp));
        let m = MultipleOf::new(&d("0.5")).unwrap();
        assert!(m.divides_int(3));
        let dv = d("2.25");
        assert!(!m.divides(&dv.digits, dv.exp));
        let m = MultipleOf::new(&d("3")).unwrap();
        assert!(m.divides_int(-9));
        assert!(!m.divides_int(10));
        let dv = d("3e400");
        assert!(m.divides(&dv.digits, dv.exp));
        let m = MultipleOf::new(&d("1e-10")).unwrap();
        let dv = d("12345678901234567890123456789.0000000001");
        assert!(m.divides(&dv.digits, dv.exp));
    }

    #[test]
    fn canonical_json_numbers_follow_rfc8785() {
        for (a, b) in [
            ("1.0", "1"),
            ("2.50", "2.5"),
            ("-0.0", "0"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("0.000001", "0.000001"),
            ("1e-7", "1e-7"),
            ("-1.5e-10", "-1.5e-10"),
            ("123.456", "123.456"),
        ] {
            assert_eq!(d(a).to_canonical_json(), b, "{a}");
        }
    }

    #[test]
    fn floor_and_ceil() {
        assert_eq!(d("2147483648").floor_i128(), 2147483648);
        assert_eq!(d("-1.5").floor_i128(), -2);
        assert_eq!(d("-1.5").ceil_i128(), -1);
        assert_eq!(d("1.5").ceil_i128(), 2);
        assert_eq!(d("1e300").floor_i128(), i128::MAX);
        assert_eq!(d("-1e300").ceil_i128(), i128::MIN);
        assert_eq!(d("0.5").floor_i128(), 0);
    }
}

//! Partition specs: the terms of `[channel.destination] partition` (`"day(event_time)"`,
//! `"bucket(16, id)"`, ...) parsed into Iceberg transforms, and the table's partition spec built
//! from them against its schema (docs/partitioning.md).
//!
//! Invariant: a term is refused, naming it, when the Iceberg specification does not allow its
//! transform on its field's type ("Partition Transforms"); floe computes no transform itself
//! (iceberg-rust's `iceberg::transform` does, on Arrow arrays, in the writer).

use std::fmt;

use iceberg::spec::{PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec};

/// The transform of a partition term, as `partition` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransformKind {
    /// `identity(f)`.
    Identity,
    /// `year(f)`.
    Year,
    /// `month(f)`.
    Month,
    /// `day(f)`.
    Day,
    /// `hour(f)`.
    Hour,
    /// `bucket(N, f)`.
    Bucket(u32),
    /// `truncate(W, f)`.
    Truncate(u32),
    /// `void(f)`.
    Void,
}

/// A term of `partition`: `transform` applied to the top-level field `source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionTerm {
    /// The transform.
    pub transform: TransformKind,
    /// Name of the source field (top-level).
    pub source: String,
}

/// The largest width of `bucket` and `truncate`: Iceberg stores it as an `int`.
const MAX_WIDTH: u32 = i32::MAX as u32;

impl PartitionTerm {
    /// `hour(source)`: the term of the `partition_field` shorthand.
    pub fn hour(source: &str) -> Self {
        PartitionTerm {
            transform: TransformKind::Hour,
            source: source.to_string(),
        }
    }

    /// Parses `transform(field)` or `transform(N, field)` (whitespace around the parts ignored).
    ///
    /// Errors: the reason, lowercase, for the caller to prefix with the key (an unknown
    /// transform, a malformed term, a missing width or one outside `1..=2147483647`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let malformed = || {
            format!(
                "{text:?} is not a partition term: expected transform(field) or \
                 bucket(N, field) / truncate(W, field)"
            )
        };
        let text_trim = text.trim();
        let (name, rest) = text_trim.split_once('(').ok_or_else(malformed)?;
        let inner = rest.strip_suffix(')').ok_or_else(malformed)?;
        let name = name.trim();
        let with_width = |kind: fn(u32) -> TransformKind| -> Result<(TransformKind, &str), String> {
            let (n, field) = inner.split_once(',').ok_or_else(|| {
                format!("{text:?}: {name} needs a width and a field: {name}(N, field)")
            })?;
            let n = n.trim();
            match n.parse::<u64>() {
                Ok(w) if (1..=u64::from(MAX_WIDTH)).contains(&w) => Ok((kind(w as u32), field)),
                _ => Err(format!(
                    "{text:?}: the width of {name} must be a whole number from 1 to {MAX_WIDTH}, not {n:?}"
                )),
            }
        };
        let (transform, field) = match name {
            "identity" => (TransformKind::Identity, inner),
            "year" => (TransformKind::Year, inner),
            "month" => (TransformKind::Month, inner),
            "day" => (TransformKind::Day, inner),
            "hour" => (TransformKind::Hour, inner),
            "void" => (TransformKind::Void, inner),
            "bucket" => with_width(TransformKind::Bucket)?,
            "truncate" => with_width(TransformKind::Truncate)?,
            other => {
                return Err(format!(
                    "{text:?}: unknown transform {other:?} (identity, year, month, day, hour, \
                     bucket, truncate, void)"
                ))
            }
        };
        let field = field.trim();
        if field.is_empty() {
            return Err(format!("{text:?}: the field name is empty"));
        }
        Ok(PartitionTerm {
            transform,
            source: field.to_string(),
        })
    }

    /// Whether the transform is a time one (`year`, `month`, `day`, `hour`): its source is the
    /// channel's time field, which every record must carry.
    pub fn is_time(&self) -> bool {
        matches!(
            self.transform,
            TransformKind::Year | TransformKind::Month | TransformKind::Day | TransformKind::Hour
        )
    }

    /// The Iceberg transform.
    pub fn iceberg_transform(&self) -> Transform {
        match self.transform {
            TransformKind::Identity => Transform::Identity,
            TransformKind::Year => Transform::Year,
            TransformKind::Month => Transform::Month,
            TransformKind::Day => Transform::Day,
            TransformKind::Hour => Transform::Hour,
            TransformKind::Bucket(n) => Transform::Bucket(n),
            TransformKind::Truncate(w) => Transform::Truncate(w),
            TransformKind::Void => Transform::Void,
        }
    }

    /// The partition field's name: the source's for `identity`, else `<source>_<suffix>`
    /// (`_year`, `_month`, `_day`, `_hour`, `_bucket`, `_trunc`, `_null`), as Iceberg's Java
    /// `PartitionSpec.Builder` names them (so `event_time_hour` for the shorthand).
    pub fn field_name(&self) -> String {
        let suffix = match self.transform {
            TransformKind::Identity => return self.source.clone(),
            TransformKind::Year => "year",
            TransformKind::Month => "month",
            TransformKind::Day => "day",
            TransformKind::Hour => "hour",
            TransformKind::Bucket(_) => "bucket",
            TransformKind::Truncate(_) => "trunc",
            TransformKind::Void => "null",
        };
        format!("{}_{suffix}", self.source)
    }
}

impl fmt::Display for PartitionTerm {
    /// The term as written in the configuration: `bucket(16, id)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.source;
        match self.transform {
            TransformKind::Identity => write!(f, "identity({s})"),
            TransformKind::Year => write!(f, "year({s})"),
            TransformKind::Month => write!(f, "month({s})"),
            TransformKind::Day => write!(f, "day({s})"),
            TransformKind::Hour => write!(f, "hour({s})"),
            TransformKind::Bucket(n) => write!(f, "bucket({n}, {s})"),
            TransformKind::Truncate(w) => write!(f, "truncate({w}, {s})"),
            TransformKind::Void => write!(f, "void({s})"),
        }
    }
}

/// Checks a whole spec's terms against each other: at most one time transform, and no
/// transform twice on one field (two `bucket`s of different widths count as twice).
///
/// Errors: `(index of the offending term, reason)`.
pub fn check_terms(terms: &[PartitionTerm]) -> Result<(), (usize, String)> {
    let mut time: Option<usize> = None;
    for (i, t) in terms.iter().enumerate() {
        if t.is_time() {
            if let Some(j) = time {
                return Err((
                    i,
                    format!(
                        "{t} is a second time transform (after {}): a spec has at most one",
                        terms[j]
                    ),
                ));
            }
            time = Some(i);
        }
        let same = |u: &PartitionTerm| {
            u.source == t.source
                && std::mem::discriminant(&u.transform) == std::mem::discriminant(&t.transform)
        };
        if let Some(j) = terms[..i].iter().position(same) {
            return Err((
                i,
                format!(
                    "{t} repeats the transform of {} on the same field",
                    terms[j]
                ),
            ));
        }
    }
    Ok(())
}

/// The source of the spec's time transform (`year`, `month`, `day`, `hour`), if any: the field
/// every record must carry (docs/partitioning.md, "The time field").
pub fn time_field(terms: &[PartitionTerm]) -> Option<&str> {
    terms
        .iter()
        .find(|t| t.is_time())
        .map(|t| t.source.as_str())
}

/// The table's partition spec: each term's transform on its top-level field of `schema`.
///
/// Errors: `(index of the term, reason)`: the field is not a top-level field of `schema`, its
/// type does not take the transform (Iceberg spec, "Partition Transforms", as iceberg-rust's
/// `Transform::result_type` applies it), or iceberg-rust refuses the spec.
pub fn unbound_spec(
    terms: &[PartitionTerm],
    schema: &Schema,
) -> Result<UnboundPartitionSpec, (usize, String)> {
    check_terms(terms)?;
    let mut b = UnboundPartitionSpec::builder().with_spec_id(0);
    for (i, t) in terms.iter().enumerate() {
        let Some(field) = schema.as_struct().field_by_name(&t.source) else {
            return Err((
                i,
                format!("{t}: {:?} is not a top-level field of the schema", t.source),
            ));
        };
        let transform = t.iceberg_transform();
        // iceberg-rust 0.10.1 truncates `Binary` arrays, not the `LargeBinary` ones Iceberg's
        // `binary` maps to (`schema_to_arrow_schema`): every write would fail.
        if matches!(t.transform, TransformKind::Truncate(_))
            && field.field_type.as_ref() == &Type::Primitive(PrimitiveType::Binary)
        {
            return Err((
                i,
                format!("{t}: truncate of a binary field is not supported (iceberg-rust 0.10.1)"),
            ));
        }
        transform.result_type(&field.field_type).map_err(|_| {
            (
                i,
                format!(
                    "{t}: {} does not take a field of type {}",
                    transform, field.field_type
                ),
            )
        })?;
        b = b
            .add_partition_field(field.id, t.field_name(), transform)
            .map_err(|e| (i, format!("{t}: {}", e.message())))?;
    }
    Ok(b.build())
}

#[cfg(test)]
mod tests;

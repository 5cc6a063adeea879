//! Schema evolution: whether a new schema version can be written into a table as it is, after an
//! evolution Iceberg allows without rewriting data, or not at all (issue 19,
//! docs/schema-mapping.md "Schema evolution").
//!
//! [`evolve`] is a pure function of the table's current Iceberg schema and the new version's
//! mapped schema. Fields are matched by name, level by level; the table's field ids are kept, and
//! a field a new version adds gets a fresh id after the table's last column id (Iceberg table
//! spec, "Schema Evolution": ids are never reused, so readers of old data files keep working).
//!
//! | table → new version | outcome |
//! |---|---|
//! | a new optional field, at any depth (struct member, inside a list element or a map value) | added (fresh ids) |
//! | `int` → `long`, `float` → `double`, `decimal(P,S)` → `decimal(P',S)` with P' > P | widened (Iceberg "type promotion") |
//! | a required field that the version makes optional | made optional |
//! | a field the version no longer has | kept; made optional if it was required (null from then on) |
//! | the same type, an enum that gained members (both `string`) | no change |
//! | a new required field that the version gives a default (an Avro field with `default`, any Protobuf field but proto2 `required`) | added as optional (Iceberg v2 has no column defaults: rows already in the table read null) |
//! | a new **required** field without a default (JSON Schema `required`, proto2 `required`, an Avro field without `default`) | incompatible: rows already in the table have no value |
//! | an optional field the version makes required | incompatible |
//! | any other type change (`long` → `int`, `string` → `int`, struct → list, …) | incompatible |
//! | the partition field changes type or requiredness, or is gone | incompatible |
//! | nesting beyond [`MAX_SCHEMA_DEPTH`] | incompatible |
//!
//! The first incompatible difference is reported by field path (`a.b.element.c`), so the DLQ
//! message of a refused version's records names it.

use std::collections::BTreeSet;
use std::sync::Arc;

use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};

use super::MAX_SCHEMA_DEPTH;

/// One difference an evolution applies to the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A new optional field at `path`, of type `ty` (Iceberg's type text), with field id `id`.
    Added {
        /// Dotted path (`payload.element.note`).
        path: String,
        /// The type, as Iceberg writes it (`long`, `struct<…>`).
        ty: String,
        /// The fresh field id.
        id: i32,
    },
    /// The field at `path` widens from `from` to `to`.
    Widened {
        /// Dotted path.
        path: String,
        /// The table's type.
        from: String,
        /// The new type.
        to: String,
    },
    /// The required field at `path` becomes optional; `gone`: because the version no longer has it.
    MadeOptional {
        /// Dotted path.
        path: String,
        /// The version no longer has the field (it stays in the table, null from then on).
        gone: bool,
    },
}

impl std::fmt::Display for Change {
    /// `added payload.note (string)`, `widened count from int to long`, `made count optional`,
    /// `made legacy optional (no longer in the schema)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Added { path, ty, id } => write!(f, "added {path} ({ty}, field id {id})"),
            Change::Widened { path, from, to } => write!(f, "widened {path} from {from} to {to}"),
            Change::MadeOptional { path, gone: false } => write!(f, "made {path} optional"),
            Change::MadeOptional { path, gone: true } => {
                write!(f, "made {path} optional (no longer in the schema)")
            }
        }
    }
}

/// The first difference that Iceberg cannot apply without rewriting data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct Incompatible {
    /// Dotted path of the field (`<root>` for the whole record).
    pub path: String,
    /// What differs, lowercase.
    pub reason: String,
}

/// A compatible evolution: the table's next schema and what changed. `changes` is empty when the
/// version fits the table as it is (then `schema` equals the table's schema).
#[derive(Debug, Clone)]
pub struct Evolution {
    /// The table's next schema: the table's field ids, fresh ids for added fields; schema id one
    /// above the table's current one (the catalog may renumber it).
    pub schema: Schema,
    /// The differences, in the table's field order then the added fields'.
    pub changes: Vec<Change>,
    /// The highest field id of `schema` (the table's last column id when nothing was added).
    pub last_column_id: i32,
}

/// Decides whether records of a version mapped to `new` can go into a table whose current schema
/// is `table` and whose last assigned column id is `last_column_id`, and how the table evolves.
/// `partition_field` is the channel's (top-level) partition field. `new`'s field ids are ignored:
/// fields are matched by name. `defaulted` holds the dotted paths of `new`'s fields that its
/// schema gives a default ([`super::MappedSchema::defaulted_fields`]): such a field is added
/// even where the version makes it required.
///
/// Errors: the first [`Incompatible`] difference, by the rules of the module table.
pub fn evolve(
    table: &Schema,
    last_column_id: i32,
    new: &Schema,
    partition_field: &str,
    defaulted: &BTreeSet<String>,
) -> Result<Evolution, Incompatible> {
    let mut m = Merge {
        next_id: last_column_id.max(table.highest_field_id()) + 1,
        changes: Vec::new(),
        partition_field,
        defaulted,
    };
    let fields = m.merge_struct(table.as_struct(), new.as_struct(), "", 1)?;
    let changed = !m.changes.is_empty();
    let schema = if changed {
        Schema::builder()
            .with_schema_id(table.schema_id() + 1)
            .with_identifier_field_ids(table.identifier_field_ids())
            .with_fields(fields)
            .build()
            .map_err(|e| Incompatible {
                path: "<root>".into(),
                reason: format!("the evolved schema is invalid: {e}"),
            })?
    } else {
        table.clone()
    };
    Ok(Evolution {
        last_column_id: (m.next_id - 1).max(last_column_id),
        schema,
        changes: m.changes,
    })
}

struct Merge<'a> {
    next_id: i32,
    changes: Vec<Change>,
    partition_field: &'a str,
    defaulted: &'a BTreeSet<String>,
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn incompatible(path: &str, reason: impl Into<String>) -> Incompatible {
    Incompatible {
        path: if path.is_empty() {
            "<root>".into()
        } else {
            path.to_string()
        },
        reason: reason.into(),
    }
}

/// Nesting depth of a type: struct, list and map count one each (as [`MAX_SCHEMA_DEPTH`] counts).
fn depth(ty: &Type) -> usize {
    match ty {
        Type::Primitive(_) => 0,
        Type::Struct(s) => {
            1 + s
                .fields()
                .iter()
                .map(|f| depth(&f.field_type))
                .max()
                .unwrap_or(0)
        }
        Type::List(l) => 1 + depth(&l.element_field.field_type),
        Type::Map(m) => 1 + depth(&m.value_field.field_type),
    }
}

/// Iceberg's type promotions (table spec, "Schema Evolution"): `from` may widen to `to`.
fn widens(from: &PrimitiveType, to: &PrimitiveType) -> bool {
    match (from, to) {
        (PrimitiveType::Int, PrimitiveType::Long) => true,
        (PrimitiveType::Float, PrimitiveType::Double) => true,
        (
            PrimitiveType::Decimal {
                precision: p,
                scale: s,
            },
            PrimitiveType::Decimal {
                precision: q,
                scale: t,
            },
        ) => s == t && q > p,
        _ => false,
    }
}

impl Merge<'_> {
    fn fresh(&mut self) -> i32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// `ty` with fresh ids for every field below it, pre-order (a field, then its children).
    fn renumber(&mut self, ty: &Type) -> Type {
        match ty {
            Type::Primitive(_) => ty.clone(),
            Type::Struct(s) => Type::Struct(StructType::new(
                s.fields()
                    .iter()
                    .map(|f| {
                        let id = self.fresh();
                        let inner = self.renumber(&f.field_type);
                        Arc::new(with_type(f, id, inner, f.required))
                    })
                    .collect(),
            )),
            Type::List(l) => {
                let id = self.fresh();
                let inner = self.renumber(&l.element_field.field_type);
                Type::List(ListType::new(Arc::new(with_type(
                    &l.element_field,
                    id,
                    inner,
                    l.element_field.required,
                ))))
            }
            Type::Map(m) => {
                let kid = self.fresh();
                let key = self.renumber(&m.key_field.field_type);
                let vid = self.fresh();
                let value = self.renumber(&m.value_field.field_type);
                Type::Map(MapType::new(
                    Arc::new(with_type(&m.key_field, kid, key, true)),
                    Arc::new(with_type(
                        &m.value_field,
                        vid,
                        value,
                        m.value_field.required,
                    )),
                ))
            }
        }
    }

    fn merge_struct(
        &mut self,
        table: &StructType,
        new: &StructType,
        path: &str,
        level: usize,
    ) -> Result<Vec<NestedFieldRef>, Incompatible> {
        let top = path.is_empty();
        let mut out = Vec::with_capacity(table.fields().len());
        for t in table.fields() {
            let fpath = join(path, &t.name);
            let is_partition = top && t.name == self.partition_field;
            match new.fields().iter().find(|n| n.name == t.name) {
                Some(n) => out.push(self.merge_field(t, n, &fpath, level, is_partition)?),
                None if is_partition => {
                    return Err(incompatible(
                        &fpath,
                        "the partition field is no longer in the schema",
                    ))
                }
                None if t.required => {
                    self.changes.push(Change::MadeOptional {
                        path: fpath,
                        gone: true,
                    });
                    out.push(Arc::new(with_type(t, t.id, (*t.field_type).clone(), false)));
                }
                None => out.push(t.clone()),
            }
        }
        for n in new.fields() {
            if table.fields().iter().any(|t| t.name == n.name) {
                continue;
            }
            let fpath = join(path, &n.name);
            if top && n.name == self.partition_field {
                return Err(incompatible(&fpath, "a change of the partition field"));
            }
            if n.required && !self.defaulted.contains(&fpath) {
                return Err(incompatible(
                    &fpath,
                    "a new required field: rows already in the table have no value for it (make it optional)",
                ));
            }
            if level + depth(&n.field_type) > MAX_SCHEMA_DEPTH + 1 {
                return Err(incompatible(
                    &fpath,
                    format!("nesting beyond {MAX_SCHEMA_DEPTH}"),
                ));
            }
            let id = self.fresh();
            let ty = self.renumber(&n.field_type);
            self.changes.push(Change::Added {
                path: fpath,
                ty: type_text(&ty),
                id,
            });
            out.push(Arc::new(with_type(n, id, ty, false)));
        }
        Ok(out)
    }

    fn merge_field(
        &mut self,
        t: &NestedField,
        n: &NestedField,
        path: &str,
        level: usize,
        is_partition: bool,
    ) -> Result<NestedFieldRef, Incompatible> {
        if is_partition {
            if t.field_type != n.field_type || t.required != n.required {
                return Err(incompatible(
                    path,
                    format!(
                        "a change of the partition field ({} {} in the table, {} {} in the version)",
                        req_word(t.required),
                        type_text(&t.field_type),
                        req_word(n.required),
                        type_text(&n.field_type)
                    ),
                ));
            }
            return Ok(Arc::new(t.clone()));
        }
        let required = self.requiredness(t, n, path, "field", "rows")?;
        let ty = self.merge_type(&t.field_type, &n.field_type, path, level)?;
        Ok(Arc::new(with_type(t, t.id, ty, required)))
    }

    fn merge_type(
        &mut self,
        t: &Type,
        n: &Type,
        path: &str,
        level: usize,
    ) -> Result<Type, Incompatible> {
        match (t, n) {
            (Type::Primitive(a), Type::Primitive(b)) if a == b => Ok(t.clone()),
            (Type::Primitive(a), Type::Primitive(b)) if widens(a, b) => {
                self.changes.push(Change::Widened {
                    path: path.to_string(),
                    from: a.to_string(),
                    to: b.to_string(),
                });
                Ok(n.clone())
            }
            (Type::Struct(a), Type::Struct(b)) => Ok(Type::Struct(StructType::new(
                self.merge_struct(a, b, path, level + 1)?,
            ))),
            (Type::List(a), Type::List(b)) => {
                let epath = join(path, "element");
                let e = self.merge_element(&a.element_field, &b.element_field, &epath, level)?;
                Ok(Type::List(ListType::new(e)))
            }
            (Type::Map(a), Type::Map(b)) => {
                if a.key_field.field_type != b.key_field.field_type {
                    return Err(incompatible(
                        &join(path, "key"),
                        format!(
                            "the map key type changes from {} to {}",
                            type_text(&a.key_field.field_type),
                            type_text(&b.key_field.field_type)
                        ),
                    ));
                }
                let vpath = join(path, "value");
                let v = self.merge_element(&a.value_field, &b.value_field, &vpath, level)?;
                Ok(Type::Map(MapType::new(a.key_field.clone(), v)))
            }
            _ => Err(incompatible(
                path,
                format!("the type changes from {} to {}", type_text(t), type_text(n)),
            )),
        }
    }

    /// Whether `t` stays required: required → optional relaxes it (a change), optional →
    /// required is incompatible (`what` is `field` or `element`, `those` what the table holds).
    fn requiredness(
        &mut self,
        t: &NestedField,
        n: &NestedField,
        path: &str,
        what: &str,
        those: &str,
    ) -> Result<bool, Incompatible> {
        match (t.required, n.required) {
            (true, false) => {
                self.changes.push(Change::MadeOptional {
                    path: path.to_string(),
                    gone: false,
                });
                Ok(false)
            }
            (false, true) => Err(incompatible(
                path,
                format!(
                    "an optional {what} becomes required ({those} already in the table may be null)"
                ),
            )),
            (r, _) => Ok(r),
        }
    }

    /// A list element or map value: kept id, requiredness may relax, type merged one level down.
    fn merge_element(
        &mut self,
        t: &NestedField,
        n: &NestedField,
        path: &str,
        level: usize,
    ) -> Result<NestedFieldRef, Incompatible> {
        let required = self.requiredness(t, n, path, "element", "elements")?;
        let ty = self.merge_type(&t.field_type, &n.field_type, path, level + 1)?;
        Ok(Arc::new(with_type(t, t.id, ty, required)))
    }
}

/// A type as text: `long`, `decimal(38, 2)`, `struct<x: long, y: string>`, `list<long>`,
/// `map<string, long>`.
pub fn type_text(ty: &Type) -> String {
    match ty {
        Type::Primitive(p) => p.to_string(),
        Type::Struct(s) => format!(
            "struct<{}>",
            s.fields()
                .iter()
                .map(|f| format!("{}: {}", f.name, type_text(&f.field_type)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Type::List(l) => format!("list<{}>", type_text(&l.element_field.field_type)),
        Type::Map(m) => format!(
            "map<{}, {}>",
            type_text(&m.key_field.field_type),
            type_text(&m.value_field.field_type)
        ),
    }
}

fn req_word(required: bool) -> &'static str {
    if required {
        "required"
    } else {
        "optional"
    }
}

/// `f` with another id, type and requiredness, its name and doc kept.
fn with_type(f: &NestedField, id: i32, ty: Type, required: bool) -> NestedField {
    let mut nf = NestedField::new(id, &f.name, ty, required);
    if let Some(doc) = &f.doc {
        nf = nf.with_doc(doc);
    }
    nf
}

#[cfg(test)]
mod tests;

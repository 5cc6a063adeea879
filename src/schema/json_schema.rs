//! JSON Schema → Iceberg: the mapper of `json` / `gsr_json` / `json_sr` channels (see the
//! table and rules in [`crate::schema`] and docs/schema-mapping.md "JSON Schema → Iceberg").

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use super::*;

/// The longest chain of `$ref`s being expanded at once (bounds setup work and recursion).
const MAX_REF_DEPTH: usize = 64;

impl MappedSchema {
    /// Maps a JSON Schema document to an Iceberg schema, with `partition_field` (a top-level `string`
    /// with `format: date-time`) as the source of the `hour` partition.
    ///
    /// Errors: [`SchemaError`] naming the offending place by JSON pointer — an unsupported draft, a
    /// union, an untyped value, nesting deeper than [`MAX_SCHEMA_DEPTH`], a remote, dangling or
    /// recursive `$ref`, an unenforceable keyword, or a bad partition field.
    pub fn from_json_schema(schema: &Value, partition_field: &str) -> Result<Self, SchemaError> {
        let draft = detect_draft(schema)?;
        let mut mapper = Mapper {
            root: schema,
            draft,
            next_id: 1,
            ref_stack: Vec::new(),
        };
        let root = mapper.root_struct(schema, partition_field)?;
        MappedSchema::from_parts(root, partition_field, Decoding::JsonSchema(draft))
    }
}

/// Finds the top-level date-time fields of a schema (for a CLI default partition field).
/// Returns their names; errors as [`MappedSchema::from_json_schema`] would for the root.
pub fn date_time_fields(schema: &Value) -> Result<Vec<String>, SchemaError> {
    let draft = detect_draft(schema)?;
    let mut mapper = Mapper {
        root: schema,
        draft,
        next_id: 1,
        ref_stack: Vec::new(),
    };
    let root = mapper.root_struct(schema, "")?;
    Ok(root
        .fields
        .iter()
        .filter(|f| matches!(f.ty, FieldType::Timestamptz(_)))
        .map(|f| f.name.clone())
        .collect())
}

fn detect_draft(schema: &Value) -> Result<Draft, SchemaError> {
    let Some(s) = schema.get("$schema") else {
        return Ok(Draft::Draft07);
    };
    let Some(s) = s.as_str() else {
        return Err(SchemaError::invalid("/$schema", "$schema must be a string"));
    };
    let t = s.trim_end_matches('#');
    let t = t
        .strip_prefix("http://")
        .or_else(|| t.strip_prefix("https://"))
        .unwrap_or(t);
    match t {
        "json-schema.org/draft-04/schema" => Ok(Draft::Draft04),
        "json-schema.org/draft-07/schema" => Ok(Draft::Draft07),
        _ => Err(SchemaError::unsupported(
            "/$schema",
            format!("draft {s:?} is not supported: only draft-04 and draft-07"),
        )),
    }
}

/// Keywords whose constraints the converter does not enforce: refused, never ignored.
const UNENFORCED: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "patternProperties",
    "propertyNames",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "contains",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "minContains",
    "maxContains",
];

struct Mapper<'a> {
    root: &'a Value,
    draft: Draft,
    next_id: i32,
    ref_stack: Vec<String>,
}

/// A schema after `$ref`, "T or null" unions and `allOf` are resolved.
struct Resolved {
    schema: Value,
    admits_null: bool,
    /// How many `$ref`s were pushed on the stack while resolving (popped by the caller).
    refs_pushed: usize,
}

impl<'a> Mapper<'a> {
    fn take_id(&mut self) -> i32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn root_struct(&mut self, schema: &Value, partition: &str) -> Result<StructSpec, SchemaError> {
        let r = self.resolve(schema, "")?;
        let result = (|| {
            if r.admits_null {
                return Err(SchemaError::unsupported(
                    "",
                    "the record root cannot be null",
                ));
            }
            let ty = type_of(&r.schema, "")?;
            if ty != "object" {
                return Err(SchemaError::unsupported(
                    "",
                    format!("the record root must be an object with properties, not {ty}"),
                ));
            }
            let mut s = self.struct_spec(&r.schema, "", 0, partition)?;
            match r.schema.get("additionalProperties") {
                None | Some(Value::Bool(true)) => {}
                Some(Value::Bool(false)) => s.additional = Additional::Forbid,
                Some(Value::Object(_)) => {
                    return Err(SchemaError::unsupported(
                        "",
                        "an object with both properties and a schema-valued additionalProperties has no Iceberg mapping",
                    ))
                }
                Some(_) => {
                    return Err(SchemaError::invalid(
                        "/additionalProperties",
                        "additionalProperties must be a boolean or a schema",
                    ))
                }
            }
            s.min_props = self.count_keyword(&r.schema, "minProperties", "")?;
            s.max_props = self.count_keyword(&r.schema, "maxProperties", "")?;
            if !partition.is_empty() {
                let Some(f) = s.fields.iter().find(|f| f.name == partition) else {
                    return Err(SchemaError::Partition {
                        pointer: "/properties".to_string(),
                        message: format!(
                            "partition field {partition:?} is not a top-level property"
                        ),
                    });
                };
                if !matches!(f.ty, FieldType::Timestamptz(_)) {
                    return Err(SchemaError::Partition {
                        pointer: format!("/properties/{}", escape_pointer_token(partition)),
                        message: format!(
                            "partition field {partition:?} must be a string with format date-time"
                        ),
                    });
                }
            }
            Ok(s)
        })();
        self.ref_stack
            .truncate(self.ref_stack.len() - r.refs_pushed);
        result
    }

    /// Follows `$ref`s, then unwraps "T or null" unions and merges `allOf`.
    fn resolve(&mut self, schema: &Value, ptr: &str) -> Result<Resolved, SchemaError> {
        let mut cur = schema.clone();
        let mut admits_null = false;
        let mut refs_pushed = 0;
        // Bounded: each step either resolves a $ref (cycle-checked) or unwraps one union/allOf level.
        for _ in 0..256 {
            match &cur {
                Value::Bool(_) => {
                    return Err(SchemaError::unsupported(
                        ptr,
                        "a boolean schema has no Iceberg type",
                    ))
                }
                Value::Object(_) => {}
                _ => return Err(SchemaError::invalid(ptr, "a schema must be an object")),
            }
            if let Some(r) = cur.get("$ref") {
                let Some(r) = r.as_str() else {
                    return Err(SchemaError::invalid(ptr, "$ref must be a string"));
                };
                if self.ref_stack.iter().any(|x| x == r) {
                    return Err(SchemaError::unsupported(
                        ptr,
                        format!("recursive $ref {r:?} (unbounded depth > {MAX_SCHEMA_DEPTH})"),
                    ));
                }
                if self.ref_stack.len() >= MAX_REF_DEPTH {
                    return Err(SchemaError::unsupported(
                        ptr,
                        format!("$refs nested deeper than {MAX_REF_DEPTH}"),
                    ));
                }
                let target = self.lookup_ref(r, ptr)?.clone();
                self.ref_stack.push(r.to_string());
                refs_pushed += 1;
                cur = target;
                continue;
            }
            if let Some(inner) = self.null_union(&cur, ptr)? {
                admits_null |= inner.1;
                cur = inner.0;
                continue;
            }
            if cur.get("allOf").is_some() {
                cur = self.merge_all_of(&cur, ptr)?;
                continue;
            }
            return Ok(Resolved {
                schema: cur,
                admits_null,
                refs_pushed,
            });
        }
        Err(SchemaError::unsupported(
            ptr,
            "schema nests unions or $refs too deeply",
        ))
    }

    fn lookup_ref(&self, r: &str, ptr: &str) -> Result<&'a Value, SchemaError> {
        let Some(frag) = r.strip_prefix('#') else {
            return Err(SchemaError::unsupported(
                ptr,
                format!("remote $ref {r:?}: only local references (#/definitions/…) are supported"),
            ));
        };
        let decoded = percent_decode(frag).ok_or_else(|| {
            SchemaError::invalid(ptr, format!("$ref {r:?} is not a valid URI fragment"))
        })?;
        if !decoded.is_empty() && !decoded.starts_with('/') {
            return Err(SchemaError::unsupported(
                ptr,
                format!("$ref {r:?}: anchors are not supported, use a JSON pointer"),
            ));
        }
        self.root
            .pointer(&decoded)
            .ok_or_else(|| SchemaError::invalid(ptr, format!("unresolvable $ref {r:?}")))
    }

    /// `oneOf`/`anyOf` of one schema plus `{"type": "null"}` → (the schema, true); a one-element
    /// `oneOf`/`anyOf` → (it, false); a `type` array is handled in `type_of`.
    fn null_union(&mut self, s: &Value, ptr: &str) -> Result<Option<(Value, bool)>, SchemaError> {
        for kw in ["oneOf", "anyOf"] {
            let Some(branches) = s.get(kw) else { continue };
            let kptr = format!("{ptr}/{kw}");
            let Some(branches) = branches.as_array() else {
                return Err(SchemaError::invalid(
                    &kptr,
                    format!("{kw} must be an array"),
                ));
            };
            if let Some(obj) = s.as_object() {
                if let Some(k) = obj.keys().find(|k| !is_annotation(k) && k.as_str() != kw) {
                    return Err(SchemaError::unsupported(
                        ptr,
                        format!("{kw} next to {k:?} is not supported: write the union alone"),
                    ));
                }
            }
            let mut non_null = Vec::new();
            let mut nulls = 0;
            for (i, b) in branches.iter().enumerate() {
                if self.is_null_schema(b) {
                    nulls += 1;
                } else {
                    non_null.push((i, b));
                }
            }
            if non_null.len() != 1 {
                let what = if non_null.is_empty() {
                    "only null branches".to_string()
                } else {
                    format!("{} non-null branches", non_null.len())
                };
                return Err(SchemaError::unsupported(
                    ptr,
                    format!(
                        "{kw} with {what} has no Iceberg mapping (only \"T or null\" unions are)"
                    ),
                ));
            }
            return Ok(Some((non_null[0].1.clone(), nulls > 0)));
        }
        Ok(None)
    }

    fn is_null_schema(&self, b: &Value) -> bool {
        let mut b = b;
        for _ in 0..32 {
            match b.get("$ref").and_then(Value::as_str) {
                Some(r) => match r.strip_prefix('#').and_then(percent_decode) {
                    Some(p) => match self.root.pointer(&p) {
                        Some(t) => b = t,
                        None => return false,
                    },
                    None => return false,
                },
                None => break,
            }
        }
        let Some(obj) = b.as_object() else {
            return false;
        };
        obj.get("type").and_then(Value::as_str) == Some("null")
            && obj.keys().all(|k| k == "type" || is_annotation(k))
    }

    fn merge_all_of(&mut self, s: &Value, ptr: &str) -> Result<Value, SchemaError> {
        let aptr = format!("{ptr}/allOf");
        let Some(obj) = s.as_object() else {
            return Err(SchemaError::invalid(ptr, "a schema must be an object"));
        };
        let Some(parts) = obj.get("allOf").and_then(Value::as_array) else {
            return Err(SchemaError::invalid(&aptr, "allOf must be an array"));
        };
        let mut merged: Map<String, Value> = obj.clone();
        merged.remove("allOf");
        for (i, part) in parts.iter().enumerate() {
            let pptr = format!("{aptr}/{i}");
            let r = self.resolve(part, &pptr)?;
            self.ref_stack
                .truncate(self.ref_stack.len() - r.refs_pushed);
            if r.admits_null {
                return Err(SchemaError::unsupported(
                    &pptr,
                    "a nullable allOf part has no Iceberg mapping",
                ));
            }
            let Value::Object(pobj) = r.schema else {
                return Err(SchemaError::invalid(&pptr, "a schema must be an object"));
            };
            for (k, v) in pobj {
                match (k.as_str(), merged.get_mut(&k)) {
                    (_, None) => {
                        merged.insert(k, v);
                    }
                    ("properties", Some(Value::Object(mine))) => {
                        let Value::Object(theirs) = v else {
                            return Err(SchemaError::invalid(
                                &pptr,
                                "properties must be an object",
                            ));
                        };
                        for (pk, pv) in theirs {
                            match mine.get(&pk) {
                                Some(existing) if *existing != pv => {
                                    return Err(SchemaError::unsupported(
                                        &format!("{pptr}/properties/{}", escape_pointer_token(&pk)),
                                        "allOf parts define this property differently",
                                    ))
                                }
                                _ => {
                                    mine.insert(pk, pv);
                                }
                            }
                        }
                    }
                    ("required", Some(Value::Array(mine))) => {
                        if let Value::Array(theirs) = v {
                            for x in theirs {
                                if !mine.contains(&x) {
                                    mine.push(x);
                                }
                            }
                        }
                    }
                    (k, Some(mine)) => {
                        if is_annotation(k) {
                            continue;
                        }
                        if *mine != v {
                            return Err(SchemaError::unsupported(
                                &pptr,
                                format!("allOf parts disagree on {k:?}"),
                            ));
                        }
                    }
                }
            }
        }
        Ok(Value::Object(merged))
    }

    /// Maps one named value. `depth` = number of containers above it.
    fn field(
        &mut self,
        schema: &Value,
        ptr: &str,
        name: &str,
        required: bool,
        depth: usize,
    ) -> Result<FieldSpec, SchemaError> {
        let id = self.take_id();
        let r = self.resolve(schema, ptr)?;
        let result = self.field_resolved(&r, ptr, id, name, required, depth);
        self.ref_stack
            .truncate(self.ref_stack.len() - r.refs_pushed);
        result
    }

    fn field_resolved(
        &mut self,
        r: &Resolved,
        ptr: &str,
        id: i32,
        name: &str,
        required: bool,
        depth: usize,
    ) -> Result<FieldSpec, SchemaError> {
        let s = &r.schema;
        for kw in UNENFORCED {
            if s.get(*kw).is_some() {
                return Err(SchemaError::unsupported(
                    ptr,
                    format!("keyword {kw:?} is not supported (it would not be enforced)"),
                ));
            }
        }
        let doc = s
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string);
        let enum_members = if let Some(e) = s.get("enum") {
            let Some(a) = e.as_array() else {
                return Err(SchemaError::invalid(ptr, "enum must be an array"));
            };
            Some(a.clone())
        } else {
            s.get("const").map(|c| vec![c.clone()])
        };
        let (ty, null_in_type) = type_keyword(s, ptr, enum_members.is_some())?;
        let admits_null = r.admits_null || null_in_type;
        let mk = |ty: FieldType, admits_null: bool| FieldSpec {
            id,
            name: name.to_string(),
            required,
            admits_null,
            is_partition: false,
            ty,
            doc: doc.clone(),
            has_default: false,
        };
        if let Some(members) = enum_members {
            let (ft, allows_null) =
                self.enum_type(r, &members, ty.as_deref(), null_in_type, ptr)?;
            return Ok(mk(ft, allows_null));
        }
        let Some(ty) = ty else {
            return Err(SchemaError::unsupported(
                ptr,
                "no type: a value without \"type\" (or enum/const) has no Iceberg type",
            ));
        };
        let ft = match ty.as_str() {
            "boolean" => FieldType::Boolean,
            "integer" => integer_type(self.num_spec(s, ptr)?),
            "number" => number_type(self.num_spec(s, ptr)?, ptr)?,
            "string" => string_type(s, self.str_spec(s, ptr)?),
            "object" => self.object_type(s, ptr, depth)?,
            "array" => self.array_type(s, ptr, depth)?,
            other => {
                return Err(SchemaError::invalid(ptr, format!("unknown type {other:?}")));
            }
        };
        Ok(mk(ft, admits_null))
    }

    /// The type of an `enum`/`const` field whose `type` keyword names `ty` (with `null` when
    /// `null_in_type`), and whether it allows `null`.
    fn enum_type(
        &mut self,
        r: &Resolved,
        members: &[Value],
        ty: Option<&str>,
        null_in_type: bool,
        ptr: &str,
    ) -> Result<(FieldType, bool), SchemaError> {
        let s = &r.schema;
        let admits_null = r.admits_null || null_in_type;
        let json_ty = match ty {
            None => None,
            Some(t) => Some(
                JsonType::named(t)
                    .ok_or_else(|| SchemaError::invalid(ptr, format!("unknown type {t:?}")))?,
            ),
        };
        let (members, null_member) = self.enum_members(s, members, json_ty, admits_null, ptr)?;
        let mut strspec = if matches!(json_ty, None | Some(JsonType::String)) {
            self.str_spec(s, ptr)?
        } else {
            StrSpec::default()
        };
        strspec.format = s
            .get("format")
            .and_then(Value::as_str)
            .and_then(StrFormat::asserted);
        // A union's null branch allows null whatever the other branch's enum says; a null
        // the `type` keyword lets through is still checked against the members.
        let allows_null = null_member || r.admits_null;
        let spec = EnumSpec {
            members,
            ty: json_ty,
            null_refused_by_enum: !allows_null && (json_ty.is_none() || null_in_type),
        };
        Ok((FieldType::Enum(spec, strspec), allows_null))
    }

    /// The members of an `enum`/`const` that its sibling keywords allow (JSON Schema applies
    /// each keyword to the values of its type), and whether `null` is one of them. String
    /// keywords are checked on the record's value instead ([`EnumSpec`]); keywords that would
    /// need a member validated against subschemas are refused.
    fn enum_members(
        &self,
        s: &Value,
        members: &[Value],
        ty: Option<JsonType>,
        admits_null: bool,
        ptr: &str,
    ) -> Result<(Vec<EnumMember>, bool), SchemaError> {
        let num = match ty {
            None | Some(JsonType::Number | JsonType::Integer) => Some(self.num_spec(s, ptr)?),
            _ => None,
        };
        let min_props = self.count_keyword(s, "minProperties", ptr)?;
        let max_props = self.count_keyword(s, "maxProperties", ptr)?;
        let min_items = self.count_keyword(s, "minItems", ptr)?;
        let max_items = self.count_keyword(s, "maxItems", ptr)?;
        let required: Vec<&str> = match s.get("required") {
            None => Vec::new(),
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            Some(_) => {
                return Err(SchemaError::invalid(
                    &format!("{ptr}/required"),
                    "required must be an array of property names",
                ))
            }
        };
        let within = |n: usize, min: Option<u64>, max: Option<u64>| {
            let n = n as u64;
            min.is_none_or(|m| n >= m) && max.is_none_or(|m| n <= m)
        };
        let mut out = Vec::new();
        let mut null_member = false;
        for m in members {
            let fits = match (ty, m) {
                (_, Value::Null) => admits_null || ty.is_none() || ty == Some(JsonType::Null),
                (None, _) => true,
                (Some(JsonType::String), Value::String(_)) => true,
                (Some(JsonType::Number), Value::Number(_)) => true,
                (Some(JsonType::Integer), Value::Number(n)) => {
                    Dec::from_json(n).map(|d| d.exp >= 0).unwrap_or(false)
                        && (self.draft == Draft::Draft07 || !n.is_f64())
                }
                (Some(JsonType::Boolean), Value::Bool(_)) => true,
                (Some(JsonType::Object), Value::Object(_)) => true,
                (Some(JsonType::Array), Value::Array(_)) => true,
                _ => false,
            };
            if !fits {
                continue;
            }
            let allowed = match m {
                Value::Number(n) => {
                    let d = Dec::from_json(n).ok_or_else(|| {
                        SchemaError::invalid(ptr, "enum member is not a valid number")
                    })?;
                    num.as_ref().is_none_or(|spec| spec.allows(&d))
                }
                Value::Object(o) => {
                    let noop = [
                        ("properties", json!({})),
                        ("additionalProperties", json!(true)),
                    ];
                    refuse_next_to_enum(s, ptr, &noop, "object")?;
                    within(o.len(), min_props, max_props)
                        && required.iter().all(|k| o.contains_key(*k))
                }
                Value::Array(a) => {
                    let noop = [("items", json!({})), ("uniqueItems", json!(false))];
                    refuse_next_to_enum(s, ptr, &noop, "array")?;
                    within(a.len(), min_items, max_items)
                }
                _ => true,
            };
            if !allowed {
                continue;
            }
            out.push(match m {
                Value::Null => {
                    null_member = true;
                    EnumMember::Null
                }
                Value::String(s) => EnumMember::Str(s.clone()),
                Value::Bool(b) => EnumMember::Bool(*b),
                Value::Number(n) => {
                    let value = Dec::from_json(n).ok_or_else(|| {
                        SchemaError::invalid(ptr, "enum member is not a valid number")
                    })?;
                    let text = value.to_canonical_json();
                    EnumMember::Num { value, text }
                }
                other => EnumMember::Other {
                    value: other.clone(),
                    text: canonical_json(other),
                },
            });
        }
        if out.is_empty() {
            return Err(SchemaError::unsupported(
                ptr,
                "enum allows no value of the declared type and keywords",
            ));
        }
        Ok((out, null_member))
    }

    fn num_keyword(&self, s: &Value, kw: &str, ptr: &str) -> Result<Option<Dec>, SchemaError> {
        match s.get(kw) {
            None => Ok(None),
            Some(Value::Number(n)) => Dec::from_json(n)
                .map(Some)
                .ok_or_else(|| SchemaError::invalid(&format!("{ptr}/{kw}"), "not a finite number")),
            Some(_) => Err(SchemaError::invalid(
                &format!("{ptr}/{kw}"),
                format!("{kw} must be a number"),
            )),
        }
    }

    fn count_keyword(&self, s: &Value, kw: &str, ptr: &str) -> Result<Option<u64>, SchemaError> {
        match s.get(kw) {
            None => Ok(None),
            Some(v) => {
                if let Some(n) = v.as_u64() {
                    return Ok(Some(n));
                }
                // draft-07 allows 2.0 as a non-negative integer.
                if let Some(d) = v.as_number().and_then(Dec::from_json) {
                    if !d.neg && d.exp >= 0 {
                        return Ok(Some(u64::try_from(d.floor_i128()).unwrap_or(u64::MAX)));
                    }
                }
                Err(SchemaError::invalid(
                    &format!("{ptr}/{kw}"),
                    format!("{kw} must be a non-negative integer"),
                ))
            }
        }
    }

    fn num_spec(&self, s: &Value, ptr: &str) -> Result<NumSpec, SchemaError> {
        let mut spec = NumSpec::default();
        let min = self.num_keyword(s, "minimum", ptr)?;
        let max = self.num_keyword(s, "maximum", ptr)?;
        match self.draft {
            Draft::Draft04 => {
                let flag = |kw: &str| -> Result<bool, SchemaError> {
                    match s.get(kw) {
                        None => Ok(false),
                        Some(Value::Bool(b)) => Ok(*b),
                        Some(_) => Err(SchemaError::invalid(
                            &format!("{ptr}/{kw}"),
                            format!("{kw} must be a boolean in draft-04"),
                        )),
                    }
                };
                let exmin = flag("exclusiveMinimum")?;
                let exmax = flag("exclusiveMaximum")?;
                if let Some(v) = min {
                    spec.lower.push(Bound {
                        value: v,
                        exclusive: exmin,
                    });
                }
                if let Some(v) = max {
                    spec.upper.push(Bound {
                        value: v,
                        exclusive: exmax,
                    });
                }
            }
            Draft::Draft07 => {
                if let Some(v) = min {
                    spec.lower.push(Bound {
                        value: v,
                        exclusive: false,
                    });
                }
                if let Some(v) = max {
                    spec.upper.push(Bound {
                        value: v,
                        exclusive: false,
                    });
                }
                if let Some(v) = self.num_keyword(s, "exclusiveMinimum", ptr)? {
                    spec.lower.push(Bound {
                        value: v,
                        exclusive: true,
                    });
                }
                if let Some(v) = self.num_keyword(s, "exclusiveMaximum", ptr)? {
                    spec.upper.push(Bound {
                        value: v,
                        exclusive: true,
                    });
                }
            }
        }
        if let Some(m) = self.num_keyword(s, "multipleOf", ptr)? {
            spec.multiple_of = Some(MultipleOf::new(&m).ok_or_else(|| {
                SchemaError::invalid(
                    &format!("{ptr}/multipleOf"),
                    "multipleOf must be a positive number",
                )
            })?);
        }
        Ok(spec)
    }

    fn str_spec(&self, s: &Value, ptr: &str) -> Result<StrSpec, SchemaError> {
        let mut ss = StrSpec {
            min_len: self.count_keyword(s, "minLength", ptr)?,
            max_len: self.count_keyword(s, "maxLength", ptr)?,
            ..StrSpec::default()
        };
        if let Some(p) = s.get("pattern") {
            let pptr = format!("{ptr}/pattern");
            let Some(p) = p.as_str() else {
                return Err(SchemaError::invalid(&pptr, "pattern must be a string"));
            };
            let re = regex::Regex::new(&ecma_to_rust_regex(p)).map_err(|e| {
                SchemaError::unsupported(&pptr, format!("pattern {p:?} is not supported: {e}"))
            })?;
            ss.pattern = Some(re);
            ss.pattern_text = Some(p.to_string());
        }
        Ok(ss)
    }

    fn object_type(
        &mut self,
        s: &Value,
        ptr: &str,
        depth: usize,
    ) -> Result<FieldType, SchemaError> {
        if depth + 1 > MAX_SCHEMA_DEPTH {
            return Err(SchemaError::unsupported(
                ptr,
                format!("nesting depth {} > {MAX_SCHEMA_DEPTH}", depth + 1),
            ));
        }
        let props = match s.get("properties") {
            None => None,
            Some(Value::Object(p)) => Some(p),
            Some(_) => {
                return Err(SchemaError::invalid(
                    &format!("{ptr}/properties"),
                    "properties must be an object",
                ))
            }
        };
        let has_props = props.map(|p| !p.is_empty()).unwrap_or(false);
        let min_props = self.count_keyword(s, "minProperties", ptr)?;
        let max_props = self.count_keyword(s, "maxProperties", ptr)?;
        match s.get("additionalProperties") {
            Some(Value::Object(ap)) if !has_props => {
                let key_id = self.take_id();
                let mut value = self.field(
                    &Value::Object(ap.clone()),
                    &format!("{ptr}/additionalProperties"),
                    "value",
                    true,
                    depth + 1,
                )?;
                value.required = true;
                Ok(FieldType::Map(MapSpec {
                    value: Box::new(value),
                    key_id,
                    min_props,
                    max_props,
                }))
            }
            Some(Value::Object(_)) => Err(SchemaError::unsupported(
                ptr,
                "an object with both properties and a schema-valued additionalProperties has no Iceberg mapping",
            )),
            Some(Value::Bool(true)) | None if !has_props => Err(SchemaError::unsupported(
                ptr,
                "an object without properties or typed additionalProperties has no Iceberg type",
            )),
            Some(Value::Bool(false)) if !has_props => Err(SchemaError::unsupported(
                ptr,
                "an object that allows no property has no Iceberg type",
            )),
            Some(Value::Bool(_)) | None => {
                let additional = if s.get("additionalProperties") == Some(&Value::Bool(false)) {
                    Additional::Forbid
                } else {
                    Additional::Drop
                };
                let mut spec = self.struct_spec(s, ptr, depth + 1, "")?;
                spec.additional = additional;
                spec.min_props = min_props;
                spec.max_props = max_props;
                Ok(FieldType::Struct(spec))
            }
            Some(_) => Err(SchemaError::invalid(
                &format!("{ptr}/additionalProperties"),
                "additionalProperties must be a boolean or a schema",
            )),
        }
    }

    /// The fields of an object schema (`depth` = the struct's own depth; 0 for the root).
    fn struct_spec(
        &mut self,
        s: &Value,
        ptr: &str,
        depth: usize,
        partition: &str,
    ) -> Result<StructSpec, SchemaError> {
        for kw in UNENFORCED {
            if s.get(*kw).is_some() {
                return Err(SchemaError::unsupported(
                    ptr,
                    format!("keyword {kw:?} is not supported (it would not be enforced)"),
                ));
            }
        }
        let props: BTreeMap<&String, &Value> = match s.get("properties") {
            Some(Value::Object(p)) => p.iter().collect(),
            Some(_) => {
                return Err(SchemaError::invalid(
                    &format!("{ptr}/properties"),
                    "properties must be an object",
                ))
            }
            None => BTreeMap::new(),
        };
        if props.is_empty() {
            return Err(SchemaError::unsupported(
                ptr,
                "an object without properties has no Iceberg type",
            ));
        }
        let mut required = BTreeSet::new();
        match s.get("required") {
            None => {}
            Some(Value::Array(a)) => {
                for r in a {
                    let Some(r) = r.as_str() else {
                        return Err(SchemaError::invalid(
                            &format!("{ptr}/required"),
                            "required must list strings",
                        ));
                    };
                    if !props.contains_key(&r.to_string()) {
                        return Err(SchemaError::unsupported(
                            &format!("{ptr}/required"),
                            format!("required property {r:?} is not declared in properties"),
                        ));
                    }
                    required.insert(r.to_string());
                }
            }
            // draft-03 style `"required": true` on a property: not draft-04/-07.
            Some(_) => {
                return Err(SchemaError::invalid(
                    &format!("{ptr}/required"),
                    "required must be an array of property names",
                ))
            }
        }
        let mut fields = Vec::with_capacity(props.len());
        for (name, sub) in props {
            let fptr = format!("{ptr}/properties/{}", escape_pointer_token(name));
            let is_partition = depth == 0 && !partition.is_empty() && name == partition;
            let req = required.contains(name.as_str()) || is_partition;
            let mut f = self.field(sub, &fptr, name, req, depth)?;
            if is_partition {
                f.is_partition = true;
                f.required = true;
                f.admits_null = false;
            }
            fields.push(f);
        }
        Ok(StructSpec {
            fields,
            additional: Additional::Drop,
            min_props: None,
            max_props: None,
        })
    }

    fn array_type(&mut self, s: &Value, ptr: &str, depth: usize) -> Result<FieldType, SchemaError> {
        if depth + 1 > MAX_SCHEMA_DEPTH {
            return Err(SchemaError::unsupported(
                ptr,
                format!("nesting depth {} > {MAX_SCHEMA_DEPTH}", depth + 1),
            ));
        }
        if s.get("uniqueItems") == Some(&Value::Bool(true)) {
            return Err(SchemaError::unsupported(
                ptr,
                "uniqueItems is not supported (it would not be enforced)",
            ));
        }
        let items = match s.get("items") {
            Some(i @ Value::Object(_)) => i.clone(),
            Some(Value::Array(_)) => {
                return Err(SchemaError::unsupported(
                    &format!("{ptr}/items"),
                    "tuple items (an array of schemas) have no Iceberg mapping",
                ))
            }
            _ => {
                return Err(SchemaError::unsupported(
                    ptr,
                    "an array without an items schema has no Iceberg type",
                ))
            }
        };
        let min_items = self.count_keyword(s, "minItems", ptr)?;
        let max_items = self.count_keyword(s, "maxItems", ptr)?;
        let element = self.field(&items, &format!("{ptr}/items"), "element", true, depth + 1)?;
        Ok(FieldType::List(ListSpec {
            element: Box::new(element),
            min_items,
            max_items,
        }))
    }
}

/// Refuses the keywords of `noop` (each with the value that asks nothing) next to an enum with
/// `what` members: floe would not check the members against them.
fn refuse_next_to_enum(
    s: &Value,
    ptr: &str,
    noop: &[(&str, Value)],
    what: &str,
) -> Result<(), SchemaError> {
    match noop.iter().find(|(kw, v)| s.get(*kw).is_some_and(|x| x != v)) {
        Some((kw, _)) => Err(SchemaError::unsupported(
            ptr,
            format!("{kw} next to an enum with {what} members is not supported (it would not be enforced)"),
        )),
        None => Ok(()),
    }
}

fn type_of(s: &Value, ptr: &str) -> Result<String, SchemaError> {
    match s.get("type") {
        Some(Value::String(t)) => Ok(t.clone()),
        Some(Value::Array(a)) => {
            let names: Vec<&str> = a
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect();
            if names.len() == 1 {
                Ok(names[0].to_string())
            } else {
                Err(SchemaError::unsupported(
                    ptr,
                    "the record root must be an object",
                ))
            }
        }
        _ => Err(SchemaError::unsupported(
            ptr,
            "the record root must declare \"type\": \"object\"",
        )),
    }
}

fn is_annotation(k: &str) -> bool {
    matches!(
        k,
        "title"
            | "description"
            | "default"
            | "examples"
            | "$comment"
            | "readOnly"
            | "writeOnly"
            | "$id"
            | "id"
            | "$schema"
            | "definitions"
            | "$defs"
            | "deprecated"
    )
}

/// Canonical JSON text of a value (RFC 8785: no whitespace, object keys sorted, numbers as
/// ECMAScript prints them).
pub fn canonical_json(v: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Number(n) => match Dec::from_json(n) {
                Some(d) => out.push_str(&d.to_canonical_json()),
                None => out.push_str(&n.to_string()),
            },
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(x, out);
                }
                out.push(']');
            }
            Value::Object(o) => {
                // RFC 8785 sorts by UTF-16 code units.
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(&o[k], out);
                }
                out.push('}');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut s = String::new();
    write(v, &mut s);
    s
}

/// Percent-decodes a URI fragment (RFC 3986 §2.1); `None` on bad escapes or invalid UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Rewrites the ECMA-262 shorthand classes whose meaning differs in the `regex` crate (`\d`, `\w` are
/// ASCII in ECMA-262, Unicode in `regex`), so that `pattern` matches as JSON Schema specifies.
pub(super) fn ecma_to_rust_regex(p: &str) -> String {
    let mut out = String::with_capacity(p.len() + 8);
    let mut chars = p.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('d') if in_class => out.push_str("0-9"),
                Some('w') if in_class => out.push_str("0-9A-Za-z_"),
                Some('d') => out.push_str("[0-9]"),
                Some('D') if !in_class => out.push_str("[^0-9]"),
                Some('w') => out.push_str("[0-9A-Za-z_]"),
                Some('W') if !in_class => out.push_str("[^0-9A-Za-z_]"),
                Some(n) => {
                    out.push('\\');
                    out.push(n);
                }
                None => out.push('\\'),
            },
            '[' if !in_class => {
                in_class = true;
                out.push(c);
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    out.push_str("\\]");
                    chars.next();
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            '[' if in_class => out.push_str("\\["),
            _ => out.push(c),
        }
    }
    out
}

/// The `type` keyword of `s`: a type name (or none), and whether `null` is allowed by it. A
/// string, or an array of one type plus "null" (`integer` inside `number` is `number`);
/// `has_enum`: an `enum`/`const` may stand for the type.
///
/// Errors: other unions, `null` alone without an enum, malformed keywords.
fn type_keyword(
    s: &Value,
    ptr: &str,
    has_enum: bool,
) -> Result<(Option<String>, bool), SchemaError> {
    let (ty, null_in_type) = match s.get("type") {
        None => (None, false),
        Some(Value::String(t)) => (Some(t.clone()), false),
        Some(Value::Array(ts)) => {
            let mut names = Vec::new();
            let mut null = false;
            for t in ts {
                match t.as_str() {
                    Some("null") => null = true,
                    Some(t) => names.push(t.to_string()),
                    None => return Err(SchemaError::invalid(ptr, "type entries must be strings")),
                }
            }
            // JSON Schema: "integer" inside "number" is the same union as "number".
            if names.len() == 2
                && names.contains(&"number".into())
                && names.contains(&"integer".into())
            {
                names.retain(|n| n != "integer");
            }
            match names.len() {
                0 if !has_enum => {
                    return Err(SchemaError::unsupported(
                        ptr,
                        "type null alone has no Iceberg type",
                    ))
                }
                0 => (None, null),
                1 => (Some(names.remove(0)), null),
                _ => {
                    return Err(SchemaError::unsupported(
                        ptr,
                        format!(
                            "union of {} has no Iceberg mapping (only \"T or null\" unions are)",
                            names.join("|")
                        ),
                    ))
                }
            }
        }
        Some(_) => {
            return Err(SchemaError::invalid(
                ptr,
                "type must be a string or an array",
            ))
        }
    };
    if ty.as_deref() == Some("null") && !has_enum {
        return Err(SchemaError::unsupported(
            ptr,
            "type null has no Iceberg type",
        ));
    }
    Ok((ty, null_in_type))
}

/// An `integer` with bounds `spec`: `int` when every allowed value fits 32 bits, else `long`.
fn integer_type(spec: NumSpec) -> FieldType {
    let mut lo = i128::MIN;
    let mut hi = i128::MAX;
    for b in &spec.lower {
        let v = if b.exclusive {
            b.value.floor_i128().saturating_add(1)
        } else {
            b.value.ceil_i128()
        };
        lo = lo.max(v);
    }
    for b in &spec.upper {
        let v = if b.exclusive {
            b.value.ceil_i128().saturating_sub(1)
        } else {
            b.value.floor_i128()
        };
        hi = hi.min(v);
    }
    let is = IntSpec {
        lo,
        hi,
        multiple_of: spec.multiple_of,
    };
    if lo >= i128::from(i32::MIN) && hi <= i128::from(i32::MAX) {
        FieldType::Int(is)
    } else {
        FieldType::Long(is)
    }
}

/// A `number`: `decimal(38, s)` with `multipleOf` (s its fractional digits), else `double`.
///
/// Errors: a scale above 38.
fn number_type(spec: NumSpec, ptr: &str) -> Result<FieldType, SchemaError> {
    Ok(match &spec.multiple_of {
        Some(m) => {
            let scale = if m.exp < 0 { m.exp.unsigned_abs() } else { 0 };
            if scale > 38 {
                return Err(SchemaError::unsupported(
                    &format!("{ptr}/multipleOf"),
                    format!("multipleOf {} needs decimal scale {scale} > 38", m.text),
                ));
            }
            FieldType::Decimal {
                precision: 38,
                scale: scale as u32,
                spec,
            }
        }
        None => FieldType::Double(spec),
    })
}

/// A `string` of schema `s` checked by `ss`: binary when base64-encoded, else by its `format`.
fn string_type(s: &Value, mut ss: StrSpec) -> FieldType {
    let format = s.get("format").and_then(Value::as_str);
    let encoding = s
        .get("contentEncoding")
        .or_else(|| s.get("encoding"))
        .and_then(Value::as_str);
    let is_b64 =
        matches!(encoding, Some("base64" | "byte")) || matches!(format, Some("byte" | "base64"));
    if is_b64 {
        return FieldType::Binary(ss);
    }
    match format {
        Some("date-time") => FieldType::Timestamptz(ss),
        Some("date") => FieldType::Date(ss),
        Some("time") => FieldType::Time(ss),
        Some("uuid") => FieldType::Uuid(ss),
        Some("ipv4") => {
            ss.format = Some(StrFormat::Ipv4);
            FieldType::String(ss)
        }
        Some("ipv6") => {
            ss.format = Some(StrFormat::Ipv6);
            FieldType::String(ss)
        }
        _ => FieldType::String(ss),
    }
}

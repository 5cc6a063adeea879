//! Reading back what the key index is built from: the key columns of a data file, projected by
//! field id (iceberg-rust writes each column's `PARQUET:field_id`), hashed in row order, and
//! the positions a data file's delete file (deletion vector or position-delete file) deletes.
//!
//! Only the key columns' chunks are fetched (ranged reads through the table's `FileIO`), so a
//! wide row costs nothing beyond its key.

use arrow_array::{ArrayRef, RecordBatch};
use futures::TryStreamExt;
use iceberg::arrow::ArrowFileReader;
use iceberg::io::FileIO;
use iceberg::spec::{DataFile, DataFileFormat};
use iceberg::{Error, ErrorKind};
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask, PARQUET_FIELD_ID_META_KEY};
use roaring::RoaringTreemap;

use super::keys::{key_hashes, KeyHash};
use super::{dv, position};

/// The key hash of every row of the Parquet data file at `path` (position = index), the key
/// being the top-level columns with field ids `field_ids`, in that order.
///
/// Errors: the storage's; `DataInvalid` when the file is not Parquet, lacks a key column (no
/// column carries that `PARQUET:field_id`) or a key column cannot be hashed
/// ([`super::keys::KeyError`]).
pub async fn read_key_hashes(
    file_io: &FileIO,
    path: &str,
    field_ids: &[i32],
) -> iceberg::Result<Vec<KeyHash>> {
    let input = file_io.new_input(path)?;
    let meta = input.metadata().await?;
    let reader = ArrowFileReader::new(meta, input.reader().await?);
    let builder = ParquetRecordBatchStreamBuilder::new(reader)
        .await
        .map_err(parquet_error(path))?;
    let descr = builder.parquet_schema();
    let mut leaves = Vec::with_capacity(field_ids.len());
    for id in field_ids {
        let leaf = (0..descr.num_columns()).find(|&i| {
            let column = descr.column(i);
            let info = column.self_type().get_basic_info();
            column.path().parts().len() == 1 && info.has_id() && info.id() == *id
        });
        leaves.push(leaf.ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("data file {path} has no top-level column with field id {id}"),
            )
        })?);
    }
    let mask = ProjectionMask::leaves(descr, leaves);
    let batches: Vec<RecordBatch> = builder
        .with_projection(mask)
        .build()
        .map_err(parquet_error(path))?
        .try_collect()
        .await
        .map_err(parquet_error(path))?;
    let ids = field_ids.to_vec();
    let path = path.to_string();
    // Hashing is CPU work (about 50 ns a key): off the async threads.
    tokio::task::spawn_blocking(move || hash_batches(&path, &batches, &ids))
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, "key hashing task").with_source(e))?
}

/// The key hashes of `batches` (the projected key columns), columns picked by field id.
fn hash_batches(
    path: &str,
    batches: &[RecordBatch],
    field_ids: &[i32],
) -> iceberg::Result<Vec<KeyHash>> {
    let mut out = Vec::with_capacity(batches.iter().map(RecordBatch::num_rows).sum());
    for batch in batches {
        let schema = batch.schema();
        let columns: Vec<ArrayRef> = field_ids
            .iter()
            .map(|id| {
                let at = schema.fields().iter().position(|f| {
                    f.metadata().get(PARQUET_FIELD_ID_META_KEY) == Some(&id.to_string())
                });
                at.map(|i| batch.column(i).clone()).ok_or_else(|| {
                    Error::new(
                        ErrorKind::DataInvalid,
                        format!("data file {path}: key column {id} missing from its projection"),
                    )
                })
            })
            .collect::<iceberg::Result<_>>()?;
        let hashes = key_hashes(&columns)
            .map_err(|e| Error::new(ErrorKind::DataInvalid, format!("data file {path}: {e}")))?;
        out.extend(hashes);
    }
    Ok(out)
}

/// The positions that `delete_file` (a deletion vector, or a position-delete Parquet file)
/// deletes in the data file at `data_file`.
///
/// Errors: the storage's; `DataInvalid` for a delete file of another kind (an equality-delete
/// file, a Puffin entry without its blob's offset and length).
pub async fn read_deletes(
    file_io: &FileIO,
    delete_file: &DataFile,
    data_file: &str,
) -> iceberg::Result<RoaringTreemap> {
    let f = delete_file;
    if f.content_type() != iceberg::spec::DataContentType::PositionDeletes {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!(
                "delete file {} of {data_file} deletes by equality",
                f.file_path()
            ),
        ));
    }
    match (
        f.file_format(),
        f.content_offset(),
        f.content_size_in_bytes(),
    ) {
        (DataFileFormat::Puffin, Some(offset), Some(length)) => {
            dv::read_dv(file_io, f.file_path(), offset as u64, length as u64).await
        }
        (DataFileFormat::Parquet, _, _) => {
            position::read_position_deletes(file_io, f.file_path(), data_file).await
        }
        _ => Err(Error::new(
            ErrorKind::DataInvalid,
            format!(
                "delete file {} of {data_file} is neither a deletion vector nor a parquet file",
                f.file_path()
            ),
        )),
    }
}

fn parquet_error(path: &str) -> impl Fn(parquet::errors::ParquetError) -> Error + '_ {
    move |e| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("read key columns of {path}"),
        )
        .with_source(e)
    }
}

//! Position-delete files (format v2): Parquet files of `(file_path, pos)` rows, sorted by
//! `file_path` then `pos` (Iceberg spec, "Position Delete Files"). floe writes one per data file,
//! so each carries `referenced_data_file` and equal lower and upper bounds on `file_path`, which
//! is how readers (PyIceberg, Java) match it to its data file without opening it.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use iceberg::io::FileIO;
use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, Struct};
use iceberg::{Error, ErrorKind};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, PARQUET_FIELD_ID_META_KEY};
use parquet::basic::{Compression, ZstdLevel};
use roaring::RoaringTreemap;

/// Field id of `file_path` in a position-delete file (Iceberg spec, reserved field ids).
pub const FILE_PATH_FIELD_ID: i32 = 2147483546;

/// Field id of `pos` in a position-delete file (Iceberg spec, reserved field ids).
pub const POS_FIELD_ID: i32 = 2147483545;

fn arrow_schema() -> Arc<ArrowSchema> {
    let field = |name: &str, t: DataType, id: i32| {
        Field::new(name, t, false).with_metadata(
            [(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string())]
                .into_iter()
                .collect(),
        )
    };
    Arc::new(ArrowSchema::new(vec![
        field("file_path", DataType::Utf8, FILE_PATH_FIELD_ID),
        field("pos", DataType::Int64, POS_FIELD_ID),
    ]))
}

fn parquet_error(what: &'static str) -> impl FnOnce(parquet::errors::ParquetError) -> Error {
    move |e| Error::new(ErrorKind::Unexpected, what).with_source(e)
}

/// Writes the position-delete file `path` deleting `positions` of the data file
/// `referenced_data_file` (whose partition tuple and spec id the delete file takes, as the
/// spec's delete-file matching requires), and returns its manifest form: content
/// `position_deletes`, `record_count` = positions, `referenced_data_file` set, bounds on both
/// columns. ZSTD-compressed; `pos` delta-encoded.
///
/// Errors: `ErrorKind::DataInvalid` for no positions or a position past `i64::MAX`; the Parquet
/// encoding or the storage write fails.
pub async fn write_position_deletes(
    file_io: &FileIO,
    path: &str,
    referenced_data_file: &str,
    partition: Struct,
    partition_spec_id: i32,
    positions: &RoaringTreemap,
) -> iceberg::Result<DataFile> {
    let (Some(min), Some(max)) = (positions.min(), positions.max()) else {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!("no positions to delete in {referenced_data_file}"),
        ));
    };
    let max = i64::try_from(max).map_err(|_| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("position {max} of {referenced_data_file} exceeds a long"),
        )
    })?;
    let n = positions.len() as usize;
    let schema = arrow_schema();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                referenced_data_file,
                n,
            ))),
            // Ascending: the treemap iterates in order, and `max` fits a long.
            Arc::new(Int64Array::from_iter_values(
                positions.iter().map(|p| p as i64),
            )),
        ],
    )
    .map_err(|e| Error::new(ErrorKind::Unexpected, "position delete batch").with_source(e))?;
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_column_dictionary_enabled("pos".into(), false)
        .set_column_encoding("pos".into(), parquet::basic::Encoding::DELTA_BINARY_PACKED)
        .build();
    let mut buffer = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut buffer, schema, Some(props))
        .map_err(parquet_error("position delete writer"))?;
    writer
        .write(&batch)
        .map_err(parquet_error("position delete write"))?;
    writer
        .close()
        .map_err(parquet_error("position delete close"))?;
    let size = buffer.len() as u64;
    file_io.new_output(path)?.write(buffer.into()).await?;
    let path_datum = Datum::string(referenced_data_file);
    DataFileBuilder::default()
        .content(DataContentType::PositionDeletes)
        .file_path(path.to_string())
        .file_format(DataFileFormat::Parquet)
        .partition(partition)
        .partition_spec_id(partition_spec_id)
        .record_count(n as u64)
        .file_size_in_bytes(size)
        .value_counts([(FILE_PATH_FIELD_ID, n as u64), (POS_FIELD_ID, n as u64)].into())
        .null_value_counts([(FILE_PATH_FIELD_ID, 0), (POS_FIELD_ID, 0)].into())
        .lower_bounds(
            [
                (FILE_PATH_FIELD_ID, path_datum.clone()),
                (POS_FIELD_ID, Datum::long(min as i64)),
            ]
            .into(),
        )
        .upper_bounds(
            [
                (FILE_PATH_FIELD_ID, path_datum),
                (POS_FIELD_ID, Datum::long(max)),
            ]
            .into(),
        )
        .referenced_data_file(Some(referenced_data_file.to_string()))
        .build()
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("position delete file: {e}")))
}

/// The positions a position-delete file at `path` deletes in `data_file` (rows for other data
/// files are skipped).
///
/// Errors: the storage read fails, or the file is not a Parquet file with `file_path` and
/// `pos` columns.
pub async fn read_position_deletes(
    file_io: &FileIO,
    path: &str,
    data_file: &str,
) -> iceberg::Result<RoaringTreemap> {
    let bytes = file_io.new_input(path)?.read().await?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(parquet_error("position delete reader"))?;
    let mut out = RoaringTreemap::new();
    let malformed = || {
        Error::new(
            ErrorKind::DataInvalid,
            format!("position delete file {path} lacks a string file_path or long pos column"),
        )
    };
    for batch in reader {
        let batch = batch.map_err(|e| {
            Error::new(ErrorKind::Unexpected, "position delete read").with_source(e)
        })?;
        let paths = batch
            .column_by_name("file_path")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .ok_or_else(malformed)?;
        let positions = batch
            .column_by_name("pos")
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .ok_or_else(malformed)?;
        for (p, pos) in paths.iter().zip(positions.iter()) {
            if let (Some(p), Some(pos)) = (p, pos) {
                if p == data_file {
                    out.insert(pos as u64);
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_sorted_rows_and_reads_them_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.parquet").display().to_string();
        let file_io = FileIO::new_with_fs();
        let positions: RoaringTreemap = [9u64, 0, 4, 70_000].into_iter().collect();
        let f = write_position_deletes(
            &file_io,
            &path,
            "file:/data/a.parquet",
            Struct::empty(),
            0,
            &positions,
        )
        .await
        .unwrap();
        assert_eq!(f.content_type(), DataContentType::PositionDeletes);
        assert_eq!(f.record_count(), 4);
        assert_eq!(
            f.referenced_data_file().as_deref(),
            Some("file:/data/a.parquet")
        );
        assert_eq!(f.lower_bounds()[&POS_FIELD_ID], Datum::long(0));
        assert_eq!(f.upper_bounds()[&POS_FIELD_ID], Datum::long(70_000));
        assert_eq!(
            f.file_size_in_bytes(),
            std::fs::metadata(&path).unwrap().len()
        );
        let read = read_position_deletes(&file_io, &path, "file:/data/a.parquet")
            .await
            .unwrap();
        assert_eq!(read, positions);
        let other = read_position_deletes(&file_io, &path, "file:/data/b.parquet")
            .await
            .unwrap();
        assert!(other.is_empty());
        // The rows are in file order, and the field ids are the reserved ones.
        let file = std::fs::File::open(&path).unwrap();
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
        let ids: Vec<i32> = builder
            .parquet_schema()
            .columns()
            .iter()
            .map(|c| c.self_type().get_basic_info().id())
            .collect();
        assert_eq!(ids, [FILE_PATH_FIELD_ID, POS_FIELD_ID]);
        let batch = builder.build().unwrap().next().unwrap().unwrap();
        let pos = batch
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(pos.values().to_vec(), [0, 4, 9, 70_000]);
    }
}

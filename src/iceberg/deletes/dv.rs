//! Deletion vectors (format v3): the Puffin blob `deletion-vector-v1` and the Puffin file that
//! holds one blob per data file.
//!
//! Iceberg puffin-spec, "deletion-vector-v1":
//!
//! ```text
//!  | length: u32 BE | magic D1 D3 39 64 | bitmap: 64-bit Roaring, portable | crc: u32 BE |
//!                   '--------- length counts these ---------'
//!                   '------------ crc-32 covers these ------'
//!  bitmap = count: u64 LE, then per 32-bit key (ascending): key: u32 LE + a 32-bit Roaring
//!           bitmap in the portable format (RoaringFormatSpec) = `RoaringTreemap`'s serialization
//! ```
//!
//! The blob is stored uncompressed, with snapshot id and sequence number -1 and the properties
//! `referenced-data-file` and `cardinality`; the manifest entry of a DV names the blob by
//! `content_offset` and `content_size_in_bytes`, which must equal the blob's offset and length
//! in the Puffin footer (Iceberg spec, "Deletion Vectors").

use std::collections::HashMap;
use std::io::Cursor;

use iceberg::io::FileIO;
use iceberg::puffin::{Blob, CompressionCodec, PuffinWriter, DELETION_VECTOR_V1};
use iceberg::{Error, ErrorKind};
use roaring::RoaringTreemap;

/// The magic bytes that open a `deletion-vector-v1` blob's bitmap (puffin-spec).
pub const DV_MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];

/// Blob property naming the data file a deletion vector applies to (puffin-spec).
pub const PROPERTY_REFERENCED_DATA_FILE: &str = "referenced-data-file";

/// Blob property holding the number of deleted positions (puffin-spec).
pub const PROPERTY_CARDINALITY: &str = "cardinality";

/// The four bytes `PFA1` that open and close a Puffin file (puffin-spec, "File structure").
const PUFFIN_MAGIC_LEN: u64 = 4;

/// `positions` as a `deletion-vector-v1` blob body: length, magic, portable bitmap, CRC-32.
///
/// Errors: the bitmap is larger than the format's 4-byte length can say (> 4 GiB).
pub fn encode(positions: &RoaringTreemap) -> iceberg::Result<Vec<u8>> {
    let bitmap_len = positions.serialized_size();
    let length = u32::try_from(DV_MAGIC.len() + bitmap_len).map_err(|_| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("deletion vector of {bitmap_len} bytes exceeds the blob's 4-byte length"),
        )
    })?;
    let mut out = Vec::with_capacity(4 + length as usize + 4);
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&DV_MAGIC);
    positions
        .serialize_into(&mut out)
        .map_err(|e| Error::new(ErrorKind::Unexpected, "serialize bitmap").with_source(e))?;
    let crc = crc32fast::hash(&out[4..]);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// The positions of a `deletion-vector-v1` blob body.
///
/// Errors (`ErrorKind::DataInvalid`): a blob shorter than its frame, a length that disagrees
/// with the blob's size, wrong magic bytes, a CRC-32 mismatch, or a bitmap that does not parse.
pub fn decode(blob: &[u8]) -> iceberg::Result<RoaringTreemap> {
    let invalid = |why: String| Error::new(ErrorKind::DataInvalid, why);
    if blob.len() < 12 {
        return Err(invalid(format!(
            "deletion vector blob of {} bytes is shorter than its 12-byte frame",
            blob.len()
        )));
    }
    let length = u32::from_be_bytes(blob[..4].try_into().expect("4 bytes")) as usize;
    if length + 8 != blob.len() {
        return Err(invalid(format!(
            "deletion vector length {length} disagrees with a blob of {} bytes",
            blob.len()
        )));
    }
    let body = &blob[4..4 + length];
    if body[..4] != DV_MAGIC {
        return Err(invalid(format!(
            "deletion vector magic {:02x?} is not {DV_MAGIC:02x?}",
            &body[..4]
        )));
    }
    let stored = u32::from_be_bytes(blob[4 + length..].try_into().expect("4 bytes"));
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(invalid(format!(
            "deletion vector crc-32 {stored:#010x} does not match its content ({computed:#010x})"
        )));
    }
    RoaringTreemap::deserialize_from(Cursor::new(&body[4..]))
        .map_err(|e| invalid("deletion vector bitmap does not parse".into()).with_source(e))
}

/// Where one deletion vector sits in the Puffin file [`write_puffin`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenDv {
    /// The data file it applies to.
    pub referenced_data_file: String,
    /// Deleted positions.
    pub cardinality: u64,
    /// Offset of the blob in the Puffin file, in bytes (`content_offset`).
    pub offset: u64,
    /// Length of the blob, in bytes (`content_size_in_bytes`).
    pub length: u64,
}

/// A Puffin file at `path`, written through `file_io`, holding one `deletion-vector-v1` blob per
/// entry of `vectors` (data file path, positions), in that order; returns where each blob sits
/// and the file's size in bytes.
///
/// Blobs are uncompressed and carry snapshot id and sequence number -1 (puffin-spec: the
/// snapshot that adds them is not known when they are written), `referenced-data-file` and
/// `cardinality`. Offsets follow from the layout (`PFA1`, then the blobs back to back), the
/// layout `PuffinWriter` writes; iceberg-rust 0.10.1's writer does not return them.
///
/// Errors: a blob does not encode ([`encode`]), or the storage write fails.
pub async fn write_puffin(
    file_io: &FileIO,
    path: &str,
    vectors: &[(String, RoaringTreemap)],
) -> iceberg::Result<(Vec<WrittenDv>, u64)> {
    let output = file_io.new_output(path)?;
    let properties = HashMap::from([(
        iceberg::puffin::CREATED_BY_PROPERTY.to_string(),
        "floe".to_string(),
    )]);
    let mut writer = PuffinWriter::new(&output, properties, false).await?;
    let mut written = Vec::with_capacity(vectors.len());
    let mut offset = PUFFIN_MAGIC_LEN;
    for (data_file, positions) in vectors {
        let data = encode(positions)?;
        let length = data.len() as u64;
        let blob = Blob::builder()
            .r#type(DELETION_VECTOR_V1.to_string())
            .fields(Vec::new())
            .snapshot_id(-1)
            .sequence_number(-1)
            .data(data)
            .properties(HashMap::from([
                (PROPERTY_REFERENCED_DATA_FILE.to_string(), data_file.clone()),
                (
                    PROPERTY_CARDINALITY.to_string(),
                    positions.len().to_string(),
                ),
            ]))
            .build();
        writer.add(blob, CompressionCodec::None).await?;
        written.push(WrittenDv {
            referenced_data_file: data_file.clone(),
            cardinality: positions.len(),
            offset,
            length,
        });
        offset += length;
    }
    writer.close().await?;
    let size = file_io.new_input(path)?.metadata().await?.size;
    Ok((written, size))
}

/// The positions of the deletion vector stored at `offset`, `length` bytes long, in the Puffin
/// file at `path` (a DV's `content_offset` and `content_size_in_bytes`): one ranged read.
///
/// Errors: the storage read fails, or the blob does not decode ([`decode`]).
pub async fn read_dv(
    file_io: &FileIO,
    path: &str,
    offset: u64,
    length: u64,
) -> iceberg::Result<RoaringTreemap> {
    let reader = file_io.new_input(path)?.reader().await?;
    let bytes = reader.read(offset..offset + length).await?;
    decode(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn treemap(positions: &[u64]) -> RoaringTreemap {
        positions.iter().copied().collect()
    }

    // table of data: golden blobs of Iceberg Java's `BitmapPositionDeleteIndex`
    // (core/src/test/resources/org/apache/iceberg/deletes/*-position-index.bin), byte for byte.
    const JAVA_EMPTY: [u8; 20] = [
        0x00, 0x00, 0x00, 0x0c, 0xd1, 0xd3, 0x39, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0xbf, 0x18, 0x48, 0x0c,
    ];
    /// Positions 1, 3, 5, 7, 9.
    const JAVA_SMALL_ALTERNATING: [u8; 50] = [
        0x00, 0x00, 0x00, 0x2a, 0xd1, 0xd3, 0x39, 0x64, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x3a, 0x30, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x04, 0x00, 0x10, 0x00, 0x00, 0x00, 0x01, 0x00, 0x03, 0x00, 0x05, 0x00, 0x07, 0x00, 0x09,
        0x00, 0xb3, 0xfb, 0x20, 0xbe,
    ];
    /// Positions 100, 101, 2^31 - 1 + 100, 2^31 - 1 + 101.
    const JAVA_SMALL_AND_LARGE: [u8; 56] = [
        0x00, 0x00, 0x00, 0x30, 0xd1, 0xd3, 0x39, 0x64, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x3a, 0x30, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x00, 0x80, 0x01, 0x00, 0x18, 0x00, 0x00, 0x00, 0x1c, 0x00, 0x00, 0x00, 0x64,
        0x00, 0x65, 0x00, 0x63, 0x00, 0x64, 0x00, 0x15, 0xeb, 0x1c, 0x7c,
    ];
    /// Java's `testAllContainerTypesIndexSerialization`: array, run and bitset containers under
    /// two 32-bit keys (Java run-optimizes before serializing).
    const JAVA_ALL_CONTAINER_TYPES: [u8; 94] = [
        0x00, 0x00, 0x00, 0x56, 0xd1, 0xd3, 0x39, 0x64, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x3b, 0x30, 0x02, 0x00, 0x06, 0x00, 0x00, 0x01, 0x00, 0x01,
        0x00, 0xe6, 0x03, 0x02, 0x00, 0xfd, 0xff, 0x05, 0x00, 0x07, 0x00, 0x01, 0x00, 0x01, 0x00,
        0xe6, 0x03, 0x01, 0x00, 0x01, 0x00, 0xfd, 0xff, 0x01, 0x00, 0x00, 0x00, 0x3b, 0x30, 0x02,
        0x00, 0x06, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0xe9, 0x01, 0x02, 0x00, 0xfd, 0xff, 0x0a,
        0x00, 0x14, 0x00, 0x01, 0x00, 0x0a, 0x00, 0xe9, 0x01, 0x01, 0x00, 0x01, 0x00, 0xfd, 0xff,
        0xc8, 0x9b, 0xe3, 0x97,
    ];

    #[test]
    fn encodes_byte_for_byte_as_iceberg_java() {
        assert_eq!(encode(&RoaringTreemap::new()).unwrap(), JAVA_EMPTY);
        assert_eq!(
            encode(&treemap(&[1, 3, 5, 7, 9])).unwrap(),
            JAVA_SMALL_ALTERNATING
        );
        let max = i32::MAX as u64;
        assert_eq!(
            encode(&treemap(&[100, 101, max + 100, max + 101])).unwrap(),
            JAVA_SMALL_AND_LARGE
        );
    }

    #[test]
    fn decodes_a_java_blob_with_run_and_bitset_containers() {
        let container = 1u64 << 16;
        let bitmap = 1u64 << 32;
        let mut expected = RoaringTreemap::new();
        for base in [0, bitmap] {
            let (a, b, run) = if base == 0 {
                (5, 7, 1..1000)
            } else {
                (10, 20, 10..500)
            };
            expected.insert(base + a);
            expected.insert(base + b);
            expected.insert_range(base + container + run.start..base + container + run.end);
            expected.insert_range(base + 2 * container + 1..base + 3 * container - 1);
        }
        let decoded = decode(&JAVA_ALL_CONTAINER_TYPES).unwrap();
        assert_eq!(decoded.len(), 132_561);
        assert_eq!(decoded, expected);
    }

    #[test]
    fn round_trips_positions_across_32_bit_keys() {
        let positions = treemap(&[
            0,
            1,
            65_535,
            65_536,
            u32::MAX as u64,
            1 << 32,
            (5 << 32) + 9,
        ]);
        assert_eq!(decode(&encode(&positions).unwrap()).unwrap(), positions);
        let mut dense = RoaringTreemap::new();
        dense.insert_range(10..200_000);
        assert_eq!(decode(&encode(&dense).unwrap()).unwrap(), dense);
    }

    #[test]
    fn refuses_a_blob_whose_crc_does_not_match() {
        let mut blob = JAVA_SMALL_ALTERNATING;
        blob[49] ^= 0x01;
        let e = decode(&blob).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DataInvalid);
        assert!(e.to_string().contains("crc-32 0xb3fb20bf"), "{e}");
        // A flipped bitmap byte fails the same check.
        let mut blob = JAVA_SMALL_ALTERNATING;
        blob[40] ^= 0x01;
        assert!(decode(&blob).unwrap_err().to_string().contains("crc-32"));
    }

    #[test]
    fn refuses_bad_magic_and_length() {
        let mut blob = JAVA_EMPTY;
        blob[4] = 0;
        assert!(decode(&blob).unwrap_err().to_string().contains("magic"));
        assert!(decode(&JAVA_EMPTY[..19])
            .unwrap_err()
            .to_string()
            .contains("length"));
        assert!(decode(&JAVA_EMPTY[..8])
            .unwrap_err()
            .to_string()
            .contains("frame"));
    }

    /// The offsets [`write_puffin`] reports are those of the file's own footer, and each blob
    /// read back by its range decodes to its positions.
    #[tokio::test]
    async fn puffin_offsets_match_the_footer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dv.puffin").display().to_string();
        let file_io = FileIO::new_with_fs();
        let vectors = vec![
            ("file:/a.parquet".to_string(), treemap(&[1, 3, 5])),
            ("file:/b.parquet".to_string(), treemap(&[0, 1 << 33])),
        ];
        let (written, size) = write_puffin(&file_io, &path, &vectors).await.unwrap();
        assert_eq!(size, std::fs::metadata(&path).unwrap().len());
        let reader = iceberg::puffin::PuffinReader::new(file_io.new_input(&path).unwrap());
        let footer = reader.file_metadata().await.unwrap().clone();
        assert_eq!(footer.blobs().len(), 2);
        for ((dv, blob), (file, positions)) in written.iter().zip(footer.blobs()).zip(&vectors) {
            assert_eq!((dv.offset, dv.length), (blob.offset(), blob.length()));
            assert_eq!((blob.snapshot_id(), blob.sequence_number()), (-1, -1));
            assert_eq!(blob.blob_type(), DELETION_VECTOR_V1);
            assert_eq!(blob.compression_codec(), CompressionCodec::None);
            assert_eq!(blob.properties()[PROPERTY_REFERENCED_DATA_FILE], *file);
            assert_eq!(
                blob.properties()[PROPERTY_CARDINALITY],
                positions.len().to_string()
            );
            let read = read_dv(&file_io, &path, dv.offset, dv.length)
                .await
                .unwrap();
            assert_eq!(read, *positions);
        }
    }
}

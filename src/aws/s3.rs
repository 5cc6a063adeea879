//! One S3 bucket as floe's S3 writers use it (the S3 DLQ, raw delivery): every request carries
//! `x-amz-expected-bucket-owner` when configured, and every object written (put, multipart
//! upload, copy) is encrypted with SSE-KMS under the configured customer-managed key.
//!
//! Errors are `std::io::Error`: a missing key or bucket as [`std::io::ErrorKind::NotFound`],
//! `AccessDenied` (no permission, or a bucket of another account than the expected owner) as
//! [`std::io::ErrorKind::PermissionDenied`], anything else as [`std::io::ErrorKind::Other`]
//! with the SDK's full context.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, ServerSideEncryption};

use crate::config::S3Location;

/// An S3 SDK error as an I/O error: `NotFound` for a missing key, `Other` otherwise.
pub(crate) fn s3_error<
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
>(
    what: &str,
    e: SdkError<E, R>,
) -> std::io::Error {
    let code = match &e {
        SdkError::ServiceError(s) => s.err().code().map(str::to_owned),
        _ => None,
    };
    let message = format!("{what}: {}", aws_sdk_s3::error::DisplayErrorContext(&e));
    match code.as_deref() {
        Some("NoSuchKey" | "NotFound") => {
            std::io::Error::new(std::io::ErrorKind::NotFound, message)
        }
        // 403: no permission, or the bucket belongs to another account than
        // `expected_bucket_owner`: no retry helps.
        Some("AccessDenied") => std::io::Error::new(std::io::ErrorKind::PermissionDenied, message),
        _ => std::io::Error::other(message),
    }
}

/// A bucket and the request options of every call ([`S3Location`]; its `prefix` is the
/// caller's business).
#[derive(Debug, Clone)]
pub struct S3Bucket {
    client: aws_sdk_s3::Client,
    location: S3Location,
}

/// Adds SSE-KMS under `key_arn` to a request builder that has the two setters.
macro_rules! with_sse {
    ($request:expr, $key_arn:expr) => {
        match $key_arn {
            Some(arn) => $request
                .server_side_encryption(ServerSideEncryption::AwsKms)
                .ssekms_key_id(arn),
            None => $request,
        }
    };
}

impl S3Bucket {
    /// The bucket of `location`, called through `client`.
    pub fn new(client: aws_sdk_s3::Client, location: S3Location) -> Self {
        S3Bucket { client, location }
    }

    /// Bucket, prefix and request options.
    pub fn location(&self) -> &S3Location {
        &self.location
    }

    /// `s3://<bucket>/<key>`.
    pub fn uri(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.location.bucket)
    }

    fn owner(&self) -> Option<String> {
        self.location.expected_bucket_owner.clone()
    }

    /// Writes `body` under `key` with one PUT.
    ///
    /// Errors: the S3 failure.
    pub async fn put(&self, key: &str, body: Vec<u8>, content_type: &str) -> std::io::Result<()> {
        let request = self
            .client
            .put_object()
            .bucket(&self.location.bucket)
            .key(key)
            .content_type(content_type)
            .set_expected_bucket_owner(self.owner())
            .body(ByteStream::from(body));
        with_sse!(request, &self.location.kms_key_arn)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| s3_error(&format!("put {}", self.uri(key)), e))
    }

    /// Writes `body` under `key` with a multipart upload of `part_size` parts (S3: at least
    /// 5 MiB, except the last). A failed upload is aborted (best effort).
    ///
    /// Errors: the S3 failure.
    pub async fn put_multipart(
        &self,
        key: &str,
        body: &[u8],
        content_type: &str,
        part_size: usize,
    ) -> std::io::Result<()> {
        let bucket = &self.location.bucket;
        let create = self
            .client
            .create_multipart_upload()
            .bucket(bucket)
            .key(key)
            .content_type(content_type)
            .set_expected_bucket_owner(self.owner());
        let upload_id = with_sse!(create, &self.location.kms_key_arn)
            .send()
            .await
            .map_err(|e| s3_error(&format!("create multipart upload {}", self.uri(key)), e))?
            .upload_id
            .ok_or_else(|| std::io::Error::other("create multipart upload: no upload id"))?;
        let result = async {
            let mut parts = Vec::new();
            for (i, chunk) in body.chunks(part_size.max(1)).enumerate() {
                let number = i as i32 + 1;
                let out = self
                    .client
                    .upload_part()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .part_number(number)
                    .set_expected_bucket_owner(self.owner())
                    .body(ByteStream::from(chunk.to_vec()))
                    .send()
                    .await
                    .map_err(|e| {
                        s3_error(&format!("upload part {number} of {}", self.uri(key)), e)
                    })?;
                parts.push(
                    CompletedPart::builder()
                        .part_number(number)
                        .set_e_tag(out.e_tag)
                        .build(),
                );
            }
            self.client
                .complete_multipart_upload()
                .bucket(bucket)
                .key(key)
                .upload_id(&upload_id)
                .set_expected_bucket_owner(self.owner())
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map(|_| ())
                .map_err(|e| s3_error(&format!("complete multipart upload {}", self.uri(key)), e))
        }
        .await;
        if result.is_err() {
            let _ = self
                .client
                .abort_multipart_upload()
                .bucket(bucket)
                .key(key)
                .upload_id(&upload_id)
                .set_expected_bucket_owner(self.owner())
                .send()
                .await;
        }
        result
    }

    /// Copies `from` to `to` in this bucket (server side), re-encrypted with the key.
    ///
    /// Errors: [`std::io::ErrorKind::NotFound`] when `from` is missing; the S3 failure.
    pub async fn copy(&self, from: &str, to: &str, content_type: &str) -> std::io::Result<()> {
        let copy = self
            .client
            .copy_object()
            .bucket(&self.location.bucket)
            .key(to)
            .copy_source(format!("{}/{from}", self.location.bucket))
            .content_type(content_type)
            .metadata_directive(aws_sdk_s3::types::MetadataDirective::Replace)
            .set_expected_bucket_owner(self.owner())
            .set_expected_source_bucket_owner(self.owner());
        with_sse!(copy, &self.location.kms_key_arn)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| s3_error(&format!("copy {} to {}", self.uri(from), self.uri(to)), e))
    }

    /// Whether `key` exists.
    ///
    /// Errors: the S3 failure (other than not found).
    pub async fn exists(&self, key: &str) -> std::io::Result<bool> {
        match self
            .client
            .head_object()
            .bucket(&self.location.bucket)
            .key(key)
            .set_expected_bucket_owner(self.owner())
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(s)) if s.err().is_not_found() => Ok(false),
            Err(e) => Err(s3_error(&format!("head {}", self.uri(key)), e)),
        }
    }

    /// Deletes `key` (deleting a missing key succeeds, as in S3).
    ///
    /// Errors: the S3 failure.
    pub async fn delete(&self, key: &str) -> std::io::Result<()> {
        self.client
            .delete_object()
            .bucket(&self.location.bucket)
            .key(key)
            .set_expected_bucket_owner(self.owner())
            .send()
            .await
            .map(|_| ())
            .map_err(|e| s3_error(&format!("delete {}", self.uri(key)), e))
    }

    /// The keys under `prefix`, in key order.
    ///
    /// Errors: the S3 failure.
    pub async fn list(&self, prefix: &str) -> std::io::Result<Vec<String>> {
        let mut out = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.location.bucket)
            .prefix(prefix)
            .set_expected_bucket_owner(self.owner())
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| s3_error(&format!("list {}", self.uri(prefix)), e))?;
            out.extend(
                page.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
        }
        Ok(out)
    }

    /// The bytes of `key`.
    ///
    /// Errors: [`std::io::ErrorKind::NotFound`] when missing; the S3 failure.
    pub async fn get(&self, key: &str) -> std::io::Result<Vec<u8>> {
        Ok(self
            .client
            .get_object()
            .bucket(&self.location.bucket)
            .key(key)
            .set_expected_bucket_owner(self.owner())
            .send()
            .await
            .map_err(|e| s3_error(&format!("get {}", self.uri(key)), e))?
            .body
            .collect()
            .await
            .map_err(|e| std::io::Error::other(format!("read {}: {e}", self.uri(key))))?
            .into_bytes()
            .to_vec())
    }
}

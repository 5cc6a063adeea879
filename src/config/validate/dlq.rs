//! Validation of `[channel.dlq]`: a local directory or an S3 location.

use super::Checker;
use crate::config::file::{DlqSection, S3DlqSection, Section};
use crate::config::{DlqConfig, DlqLocation};

impl Checker<'_> {
    pub(super) fn dlq(&mut self, p: &str, section: Section<DlqSection>) -> Option<DlqConfig> {
        match self.section(section, p)? {
            DlqSection::Local(local) => {
                let path = self.local_path(&format!("{p}.path"), &local.path)?;
                Some(DlqConfig {
                    location: DlqLocation::Local(path),
                    include_payload: local.include_payload,
                })
            }
            DlqSection::S3(S3DlqSection {
                bucket,
                prefix,
                expected_bucket_owner,
                kms_key_arn,
                include_payload,
            }) => {
                let location =
                    self.s3_location(p, bucket, prefix, expected_bucket_owner, kms_key_arn)?;
                Some(DlqConfig {
                    location: DlqLocation::S3(location),
                    include_payload,
                })
            }
        }
    }
}

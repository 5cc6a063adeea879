//! Validation of `[channel.record]`: the record format, the largest record size and the
//! envelope (the envelope's rules across sections are in `channel`).

use std::ops::RangeInclusive;

use super::Checker;
use crate::config::file::Section;
use crate::config::{RecordConfig, DEFAULT_MAX_RECORD_SIZE};

const MAX_RECORD_SIZE_RANGE: RangeInclusive<u64> = (1 << 10)..=(64 << 20);

impl Checker<'_> {
    pub(super) fn record(
        &mut self,
        p: &str,
        section: Section<crate::config::file::RecordSection>,
    ) -> Option<RecordConfig> {
        let r = self.section(section, p)?;
        let max_record_size = self.size(
            &format!("{p}.max_record_size"),
            r.max_record_size,
            DEFAULT_MAX_RECORD_SIZE,
            MAX_RECORD_SIZE_RANGE,
        )?;
        let format = r.format.unwrap_or_default();
        Some(RecordConfig {
            format,
            max_record_size,
            envelope: r.envelope.unwrap_or_default(),
        })
    }
}

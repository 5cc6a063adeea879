//! Wiring of a channel with a raw S3 destination (`destination.kind = "s3"`), before its tasks
//! start: its source and its bucket, checked to accept a staged put before the channel's
//! activation is recorded. Records land as objects, not rows: no schema, table or DLQ.

use std::sync::Arc;

use crate::aws::AwsClients;
use crate::channel::activate;
use crate::config::raw::RawDestinationConfig;
use crate::config::ChannelConfig;
use crate::lease::Store;
use crate::raw::{RawIo, RawStore};
use crate::worker::{ChannelIo, DestinationIo};

use super::{
    activate_err, channel_err, channel_unavailable, initial_position_of, open_source,
    register_fan_out, AppError, PreparedChannel, SharedClients,
};

/// Opens the source, checks the bucket accepts a staged put and activates the channel.
///
/// Errors: [`AppError::ChannelRefused`] or [`AppError::ChannelUnavailable`], naming the channel
/// and the reason.
pub(super) async fn prepare_raw(
    index: usize,
    config: &ChannelConfig,
    dest: &RawDestinationConfig,
    store: &dyn Store,
    aws: &AwsClients,
    shared: &SharedClients,
) -> Result<PreparedChannel, AppError> {
    let name = config.name.as_str();
    // Everything this worker could refuse is checked before the channel's state changes.
    let source = open_source(index, config, aws, shared)?;
    let raw = RawStore::new(aws.s3(), dest.location.clone(), name);
    raw.check_writable().await.map_err(|e| {
        let message = format!(
            "bucket {} does not accept a staged object: {e}",
            dest.location.bucket
        );
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            // Retrying cannot help: exit 78 for the operator.
            channel_err(
                name,
                format!("{message} (check channel.destination.expected_bucket_owner and this worker's s3:PutObject permission)"),
            )
        } else {
            channel_unavailable(name, message)
        }
    })?;
    let state = activate::record_activation(store, name)
        .await
        .map_err(|e| activate_err(name, e))?;
    if let crate::channel::RunDecision::Refuse(message) = crate::channel::run_decision(Some(&state))
    {
        return Err(channel_err(name, message));
    }
    let source = register_fan_out(config, aws, source).await?;
    let initial_position = initial_position_of(config, &state);
    Ok(PreparedChannel {
        config: config.clone(),
        io: ChannelIo {
            source,
            destination: DestinationIo::Raw(RawIo {
                store: raw,
                config: Arc::new(dest.clone()),
            }),
        },
        initial_position,
        schema_label: String::new(),
    })
}

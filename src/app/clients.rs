//! What the channels of one process share, whatever their number (issue 43): the member
//! channels of a channel with `table = "{topic}"` read through **one** set of Kafka clients
//! (one consumer assigned the union of the partitions this worker holds of every member topic,
//! [`KafkaClients`]), and every channel with the same catalog configuration uses **one** catalog
//! client (its connection pool) and swap. The lease store is one per process already
//! ([`super::open_lease_store`]).
//!
//! ```text
//!   SharedClients ── kafka:    "<channel>" ─► KafkaClients   (members "<channel>.<topic>")
//!                 └─ catalogs: CatalogConfig ─► (catalog, swap)
//! ```
//!
//! Member channels of a channel with `table = "{route}"` read the same partitions as one
//! another, each from its own table's checkpoints: they share clients that **fan out**
//! ([`KafkaClients::try_new_fanning_out`]), fetching each partition once for every member that
//! holds it on this worker (their shard leases are co-located, docs/routing.md).
//!
//! ```text
//!                 └─ kafka:    "<channel>" ─► KafkaClients, fanning out (members "<channel>.<table>")
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use iceberg::Catalog;

use crate::catalog::swap::TableSwap;
use crate::channel::activate::{self, ActivateError};
use crate::config::{CatalogConfig, ChannelConfig, SourceConfig};
use crate::source::kafka::topics::KafkaTopicsSource;
use crate::source::kafka::{KafkaClients, KafkaSource, KafkaSourceConfig};
use crate::source::{Source, SourceError};

/// A catalog client and its swap, opened once per catalog configuration.
type OpenedCatalog = (Arc<dyn Catalog>, Option<Arc<dyn TableSwap>>);

/// The clients the channels of a process share (see the module docs).
#[derive(Default)]
pub struct SharedClients {
    /// Kafka clients by the channel whose member channels share them; kept while a source
    /// uses them.
    kafka: Mutex<HashMap<String, Weak<KafkaClients>>>,
    /// Catalogs by configuration, opened one at a time (members start together).
    catalogs: tokio::sync::Mutex<Vec<(CatalogConfig, OpenedCatalog)>>,
}

impl std::fmt::Debug for SharedClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedClients").finish_non_exhaustive()
    }
}

/// The channel whose `table = "{topic}"` made `config` one of its member channels
/// (`<channel>.<topic>`, a name no configured channel has), or `None`: a configured channel or
/// a member of `table = "{route}"`.
fn topic_member_parent(config: &ChannelConfig) -> Option<&str> {
    if config.member_route().is_some() {
        return None;
    }
    config.name.split_once('.').map(|(parent, _)| parent)
}

impl SharedClients {
    /// The Kafka source of channel `config`: a member of a `table = "{topic}"` channel reads
    /// its topic through the clients every member of that channel shares; a member of a
    /// `table = "{route}"` channel reads the channel's topics through clients its members share
    /// that fetch each partition once for all of them; any other channel gets clients of its
    /// own.
    ///
    /// Errors: [`SourceError::Config`] when librdkafka refuses the client properties.
    pub fn kafka_source(
        &self,
        index: usize,
        config: &ChannelConfig,
    ) -> Result<Arc<dyn Source>, SourceError> {
        let SourceConfig::Kafka(kafka) = &config.source else {
            return Err(SourceError::Config {
                message: "not a kafka channel".into(),
            });
        };
        if let Some(parent) = config.route_parent() {
            let clients = self.kafka_clients(parent, || {
                KafkaClients::try_new_fanning_out(&KafkaSourceConfig::from_channel(
                    parent, kafka, parent,
                ))
            })?;
            return Ok(match kafka.topics.single() {
                Some(topic) => Arc::new(KafkaSource::with_clients(
                    KafkaSourceConfig::from_channel(&config.name, kafka, topic),
                    clients,
                )),
                None => Arc::new(
                    KafkaTopicsSource::with_clients(
                        KafkaSourceConfig::from_channel(
                            &config.name,
                            kafka,
                            &kafka.topics.describe(),
                        ),
                        kafka.topics.clone(),
                        clients,
                    )
                    .at_index(index),
                ),
            });
        }
        let (Some(parent), Some(topic)) = (topic_member_parent(config), kafka.topics.single())
        else {
            return crate::source::kafka::open_channel_source(index, &config.name, kafka);
        };
        let clients = self.kafka_clients(parent, || {
            KafkaClients::try_new(&KafkaSourceConfig::from_channel(parent, kafka, parent))
        })?;
        Ok(Arc::new(KafkaSource::with_clients(
            KafkaSourceConfig::from_channel(&config.name, kafka, topic),
            clients,
        )))
    }

    /// The topic lister of channel `config` (`table = "{topic}"`), reading metadata through
    /// the clients its members share.
    ///
    /// Errors: [`SourceError::Config`] when librdkafka refuses the client properties.
    pub fn topic_lister(
        &self,
        index: usize,
        config: &ChannelConfig,
    ) -> Result<KafkaTopicsSource, SourceError> {
        let SourceConfig::Kafka(kafka) = &config.source else {
            return Err(SourceError::Config {
                message: "not a kafka channel".into(),
            });
        };
        let name = config.name.as_str();
        let clients = self.kafka_clients(name, || {
            KafkaClients::try_new(&KafkaSourceConfig::from_channel(name, kafka, name))
        })?;
        let settings = KafkaSourceConfig::from_channel(name, kafka, &kafka.topics.describe());
        Ok(
            KafkaTopicsSource::with_clients(settings, kafka.topics.clone(), clients)
                .at_index(index),
        )
    }

    /// The clients of `group`, made by `make` when no source uses them now.
    fn kafka_clients(
        &self,
        group: &str,
        make: impl FnOnce() -> Result<Arc<KafkaClients>, SourceError>,
    ) -> Result<Arc<KafkaClients>, SourceError> {
        let mut kafka = self.kafka.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(clients) = kafka.get(group).and_then(Weak::upgrade) {
            return Ok(clients);
        }
        let clients = make()?;
        kafka.insert(group.to_string(), Arc::downgrade(&clients));
        Ok(clients)
    }

    /// The catalog and swap of channel `config`'s destination: opened once per catalog
    /// configuration and shared ([`activate::open_catalog_and_swap`]).
    ///
    /// Errors: as [`activate::open_catalog_and_swap`] (nothing is kept after an error).
    pub async fn catalog(
        &self,
        index: usize,
        config: &ChannelConfig,
        aws: &crate::aws::AwsClients,
    ) -> Result<OpenedCatalog, ActivateError> {
        let Some(dest) = config.destination.iceberg() else {
            return activate::open_catalog_and_swap(index, config, aws).await;
        };
        let mut catalogs = self.catalogs.lock().await;
        if let Some((_, opened)) = catalogs.iter().find(|(c, _)| *c == dest.catalog) {
            return Ok(opened.clone());
        }
        let opened = activate::open_catalog_and_swap(index, config, aws).await?;
        catalogs.push((dest.catalog.clone(), opened.clone()));
        Ok(opened)
    }
}

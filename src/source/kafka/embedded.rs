//! An embedded Kafka-protocol broker for the quickstart and for tests: librdkafka's mock cluster
//! ([`rdkafka::mocking::MockCluster`]), a real Kafka protocol implementation serving loopback
//! ports in this process, plus a small producer helper.
//!
//! `MockCluster` is neither `Send` nor `Sync` (it holds a raw pointer) and must outlive every use
//! of its ports, so [`EmbeddedKafka`] owns it on a dedicated thread and talks to it by message;
//! dropping the handle stops the cluster.
//!
//! ```text
//!   EmbeddedKafka ──commands──► thread "floe-mock-kafka" (owns MockCluster)
//!        │                              │
//!        └── bootstrap_servers ◄────────┘ 127.0.0.1:port,… (any Kafka client, any process)
//! ```
//!
//! Known limits of the mock cluster (librdkafka 2.12): ListOffsets by timestamp always answers
//! "no offset" (see [`super::KafkaSource`] for how floe copes), and partitions cannot be added to
//! an existing topic. Topics named by clients that do not exist are auto-created with 4
//! partitions when a producer asks for them.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use std::sync::atomic::{AtomicU64, Ordering};

/// A failure of the embedded broker or its producer helper.
#[derive(Debug, thiserror::Error)]
#[error("embedded kafka: {message}")]
pub struct EmbeddedKafkaError {
    message: String,
}

impl EmbeddedKafkaError {
    fn new(message: impl Into<String>) -> Self {
        EmbeddedKafkaError {
            message: message.into(),
        }
    }
}

type Reply = mpsc::Sender<Result<(), String>>;

enum Command {
    CreateTopic {
        name: String,
        partitions: i32,
        reply: Reply,
    },
    BrokerDown {
        broker_id: i32,
        reply: Reply,
    },
    BrokerUp {
        broker_id: i32,
        reply: Reply,
    },
}

/// An in-process Kafka-protocol cluster (librdkafka's mock cluster) on loopback ports.
/// Dropping it stops the cluster.
pub struct EmbeddedKafka {
    bootstrap_servers: String,
    num_brokers: i32,
    commands: Option<mpsc::Sender<Command>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for EmbeddedKafka {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedKafka")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("num_brokers", &self.num_brokers)
            .finish()
    }
}

impl EmbeddedKafka {
    /// Starts a cluster of `num_brokers` brokers (ids `1..=num_brokers`); up in about a
    /// millisecond. Topics are created with [`EmbeddedKafka::create_topic`].
    ///
    /// Errors: the mock cluster cannot start (no loopback ports).
    pub fn start(num_brokers: i32) -> Result<Self, EmbeddedKafkaError> {
        let (commands, rx) = mpsc::channel::<Command>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<String, String>>();
        let thread = std::thread::Builder::new()
            .name("floe-mock-kafka".to_string())
            .spawn(move || {
                let cluster = match MockCluster::new(num_brokers) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(cluster.bootstrap_servers()));
                // Serve commands until every sender is dropped, then drop the cluster here.
                while let Ok(cmd) = rx.recv() {
                    let (result, reply) = match cmd {
                        Command::CreateTopic {
                            name,
                            partitions,
                            reply,
                        } => (cluster.create_topic(&name, partitions, 1), reply),
                        Command::BrokerDown { broker_id, reply } => {
                            (cluster.broker_down(broker_id), reply)
                        }
                        Command::BrokerUp { broker_id, reply } => {
                            (cluster.broker_up(broker_id), reply)
                        }
                    };
                    let _ = reply.send(result.map_err(|e| e.to_string()));
                }
            })
            .map_err(|e| EmbeddedKafkaError::new(format!("cannot spawn thread: {e}")))?;
        let bootstrap_servers = ready_rx
            .recv()
            .map_err(|_| EmbeddedKafkaError::new("mock cluster thread exited"))?
            .map_err(|e| EmbeddedKafkaError::new(format!("cannot start mock cluster: {e}")))?;
        Ok(EmbeddedKafka {
            bootstrap_servers,
            num_brokers,
            commands: Some(commands),
            thread: Some(thread),
        })
    }

    /// The cluster's `bootstrap.servers` list (`127.0.0.1:port,…`).
    pub fn bootstrap_servers(&self) -> &str {
        &self.bootstrap_servers
    }

    /// The number of brokers (their ids are `1..=num_brokers`).
    pub fn num_brokers(&self) -> i32 {
        self.num_brokers
    }

    fn command(&self, make: impl FnOnce(Reply) -> Command) -> Result<(), EmbeddedKafkaError> {
        let (reply, result) = mpsc::channel();
        self.commands
            .as_ref()
            .ok_or_else(|| EmbeddedKafkaError::new("stopped"))?
            .send(make(reply))
            .map_err(|_| EmbeddedKafkaError::new("mock cluster thread exited"))?;
        result
            .recv()
            .map_err(|_| EmbeddedKafkaError::new("mock cluster thread exited"))?
            .map_err(EmbeddedKafkaError::new)
    }

    /// Creates `name` with `partitions` partitions (replication factor 1).
    ///
    /// Errors: the topic exists already, or the arguments are invalid.
    pub fn create_topic(&self, name: &str, partitions: i32) -> Result<(), EmbeddedKafkaError> {
        self.command(|reply| Command::CreateTopic {
            name: name.to_string(),
            partitions,
            reply,
        })
    }

    /// Takes broker `broker_id` down: its connections close and it refuses new ones.
    pub fn broker_down(&self, broker_id: i32) -> Result<(), EmbeddedKafkaError> {
        self.command(|reply| Command::BrokerDown { broker_id, reply })
    }

    /// Brings broker `broker_id` back up.
    pub fn broker_up(&self, broker_id: i32) -> Result<(), EmbeddedKafkaError> {
        self.command(|reply| Command::BrokerUp { broker_id, reply })
    }

    /// A producer connected to this cluster (see [`EmbeddedProducer`]).
    pub fn producer(&self) -> Result<EmbeddedProducer, EmbeddedKafkaError> {
        EmbeddedProducer::connect(&self.bootstrap_servers)
    }
}

impl Drop for EmbeddedKafka {
    fn drop(&mut self) {
        self.commands = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A blocking producer helper for tests, the quickstart and the load generator: idempotent
/// (a retried send never duplicates a record), `acks=all`. Its calls block; from async code call
/// them on `spawn_blocking`.
pub struct EmbeddedProducer {
    producer: BaseProducer<DeliveryCounter>,
}

/// Counts records the broker did not acknowledge (delivery reports with an error).
struct DeliveryCounter {
    failed: AtomicU64,
}

impl ClientContext for DeliveryCounter {}

impl ProducerContext for DeliveryCounter {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _opaque: ()) {
        if let Err((e, _)) = result {
            tracing::warn!(error = %e, "embedded producer: record not delivered");
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl std::fmt::Debug for EmbeddedProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedProducer").finish_non_exhaustive()
    }
}

impl EmbeddedProducer {
    /// Connects to any Kafka cluster at `bootstrap_servers` (`host:port,…`).
    ///
    /// Errors: invalid client configuration.
    pub fn connect(bootstrap_servers: &str) -> Result<Self, EmbeddedKafkaError> {
        let producer: BaseProducer<DeliveryCounter> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap_servers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("message.timeout.ms", "30000")
            .create_with_context(DeliveryCounter {
                failed: AtomicU64::new(0),
            })
            .map_err(|e| EmbeddedKafkaError::new(format!("cannot create producer: {e}")))?;
        Ok(EmbeddedProducer { producer })
    }

    /// Enqueues one record for `topic`: on `partition` if given, else by librdkafka's key
    /// partitioner; with `timestamp_ms` (ms since the Unix epoch) as its CreateTime if given, else
    /// the current time. Waits while the local queue is full. Delivery is confirmed by
    /// [`EmbeddedProducer::flush`].
    ///
    /// Errors: the record cannot be enqueued (too large, unknown partition).
    pub fn send(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: &[u8],
        payload: &[u8],
        timestamp_ms: Option<i64>,
    ) -> Result<(), EmbeddedKafkaError> {
        loop {
            let mut record = BaseRecord::to(topic).key(key).payload(payload);
            if let Some(p) = partition {
                record = record.partition(p);
            }
            if let Some(ts) = timestamp_ms {
                record = record.timestamp(ts);
            }
            match self.producer.send(record) {
                Ok(()) => {
                    self.producer.poll(Duration::ZERO);
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    self.producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(EmbeddedKafkaError::new(format!("send failed: {e}"))),
            }
        }
    }

    /// Waits until every enqueued record is acknowledged by the broker, up to `timeout`.
    ///
    /// Errors: records still unacknowledged at the timeout, or records the broker refused since
    /// the last flush (their number is in the message).
    pub fn flush(&self, timeout: Duration) -> Result<(), EmbeddedKafkaError> {
        self.producer
            .flush(timeout)
            .map_err(|e| EmbeddedKafkaError::new(format!("flush failed: {e}")))?;
        match self.producer.context().failed.swap(0, Ordering::Relaxed) {
            0 => Ok(()),
            n => Err(EmbeddedKafkaError::new(format!(
                "{n} records not delivered"
            ))),
        }
    }
}

//! The worker's HTTP endpoint on `worker.metrics_address`: Prometheus metrics and the health
//! checks a supervisor or load balancer asks.
//!
//! ```text
//!  GET /metrics  200  the Prometheus text exposition (metrics-exporter-prometheus render)
//!  GET /healthz  200  "ok": the process is alive and serving
//!  GET /readyz   200  every channel holds at least one lease and its catalog answers
//!                503  otherwise (starting, no lease, catalog unreachable, no topic matching
//!                     its topics/topic_pattern); the body says why
//!  other paths   404; other methods 405
//! ```
//!
//! Readiness is process-wide, like the metrics recorder: `floe run` registers each channel once
//! it is prepared ([`Readiness::register`]) and removes it when the channel is deleted.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use iceberg::{Catalog, TableIdent};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::lease::HeldLeases;

/// How long `/readyz` waits for a catalog to answer.
pub const CATALOG_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What `/readyz` checks for one channel.
/// The catalog and table a channel's readiness probe asks.
type TableProbe = (Arc<dyn Catalog>, TableIdent);

struct ChannelProbe {
    held: watch::Receiver<HeldLeases>,
    /// The catalog and table of an Iceberg channel; `None` for a raw channel (leases only).
    table: Option<TableProbe>,
}

/// The channels of this process whose readiness `/readyz` reports.
#[derive(Default)]
pub struct Readiness {
    channels: Mutex<BTreeMap<String, ChannelProbe>>,
    /// The channels whose topic selection matches no topic, with the line to show
    /// ([`crate::source::kafka::topics::unmatched_channels`] for the process's readiness).
    unmatched: Option<fn() -> BTreeMap<String, String>>,
}

/// Readiness of one channel, as `/readyz` reports it (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChannelReadiness {
    /// Channel name.
    pub channel: String,
    /// Shard leases held by this worker.
    pub shard_leases: usize,
    /// Whether this worker holds the channel's committer lease.
    pub committer: bool,
    /// `None` when the catalog answered; otherwise why not.
    pub catalog_error: Option<String>,
    /// `"no topic matches channel[i].source.topic_pattern = …"` when the channel's `topics` or
    /// `topic_pattern` matched no topic at its last listing (either table kind: a channel with
    /// `table = "{topic}"` is then listed under its own name, having no member).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_topic_matches: Option<String>,
    /// Whether this channel is ready: a lease held, the catalog answering, a topic matched.
    pub ready: bool,
}

/// The answer of `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadyReport {
    /// Whether every channel is ready (and there is at least one).
    pub ready: bool,
    /// Per channel.
    pub channels: Vec<ChannelReadiness>,
}

impl Readiness {
    /// The process-wide registry `floe run` fills.
    pub fn global() -> &'static Readiness {
        static GLOBAL: OnceLock<Readiness> = OnceLock::new();
        GLOBAL.get_or_init(|| Readiness {
            unmatched: Some(crate::source::kafka::topics::unmatched_channels),
            ..Readiness::default()
        })
    }

    /// Adds (or replaces) a prepared channel.
    pub fn register(
        &self,
        channel: &str,
        held: watch::Receiver<HeldLeases>,
        catalog: Arc<dyn Catalog>,
        ident: TableIdent,
    ) {
        self.insert(channel, held, Some((catalog, ident)));
    }

    /// Adds (or replaces) a prepared raw channel: ready when it holds a lease.
    pub fn register_raw(&self, channel: &str, held: watch::Receiver<HeldLeases>) {
        self.insert(channel, held, None);
    }

    fn insert(&self, channel: &str, held: watch::Receiver<HeldLeases>, table: Option<TableProbe>) {
        self.channels
            .lock()
            .expect("readiness lock")
            .insert(channel.to_string(), ChannelProbe { held, table });
    }

    /// Removes a channel that stopped delivering on purpose (deleted).
    pub fn deregister(&self, channel: &str) {
        self.channels
            .lock()
            .expect("readiness lock")
            .remove(channel);
    }

    /// Checks every registered channel: leases held (no I/O) and the catalog answering a
    /// `table_exists` within [`CATALOG_PROBE_TIMEOUT`].
    pub async fn check(&self) -> ReadyReport {
        let probes: Vec<(String, HeldLeases, Option<TableProbe>)> = self
            .channels
            .lock()
            .expect("readiness lock")
            .iter()
            .map(|(name, p)| (name.clone(), p.held.borrow().clone(), p.table.clone()))
            .collect();
        let mut channels = Vec::with_capacity(probes.len());
        for (channel, held, table) in probes {
            let catalog_error = match table {
                None => None,
                Some((catalog, ident)) => {
                    match tokio::time::timeout(CATALOG_PROBE_TIMEOUT, catalog.table_exists(&ident))
                        .await
                    {
                        Ok(Ok(true)) => None,
                        Ok(Ok(false)) => Some(format!("table {ident} does not exist")),
                        Ok(Err(e)) => Some(e.to_string()),
                        Err(_) => Some(format!(
                            "catalog did not answer within {CATALOG_PROBE_TIMEOUT:?}"
                        )),
                    }
                }
            };
            let shard_leases = held.shards.len();
            let committer = held.committer.is_some();
            channels.push(ChannelReadiness {
                ready: (shard_leases > 0 || committer) && catalog_error.is_none(),
                channel,
                shard_leases,
                committer,
                catalog_error,
                no_topic_matches: None,
            });
        }
        // A channel whose topic selection matches nothing is not ready, said the same way for a
        // named table (registered) and a table per topic (no member registered).
        for (channel, note) in self
            .unmatched
            .map(|unmatched| unmatched())
            .unwrap_or_default()
        {
            match channels.iter_mut().find(|c| c.channel == channel) {
                Some(c) => {
                    c.ready = false;
                    c.no_topic_matches = Some(note);
                }
                None => channels.push(ChannelReadiness {
                    channel,
                    shard_leases: 0,
                    committer: false,
                    catalog_error: None,
                    no_topic_matches: Some(note),
                    ready: false,
                }),
            }
        }
        ReadyReport {
            ready: !channels.is_empty() && channels.iter().all(|c| c.ready),
            channels,
        }
    }
}

/// Binds the endpoint's address (before anything else starts, so a taken port is reported at
/// once).
///
/// Errors: the address cannot be bound.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `listener` until the process exits; also
/// runs the recorder's upkeep every 5 s.
pub async fn serve(
    listener: TcpListener,
    metrics: PrometheusHandle,
    readiness: &'static Readiness,
) {
    {
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                metrics.run_upkeep();
            }
        });
    }
    serve_http1(listener, "metrics endpoint", move |req| {
        let metrics = metrics.clone();
        async move { answer(&req, &metrics, readiness).await }
    })
    .await
}

/// A connection that does not send a request's headers within this time is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves HTTP/1.1 on `listener` forever, each connection on its own task, answering every
/// request with `handler`; `what` names the server in logs. A failed accept is logged and
/// retried after 100 ms; a connection is closed when a request's headers take longer than
/// [`HEADER_READ_TIMEOUT`].
pub async fn serve_http1<F, Fut>(listener: TcpListener, what: &'static str, handler: F)
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "{what}: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let answer = handler(req);
                async move { Ok::<_, Infallible>(answer.await) }
            });
            if let Err(e) = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %e, "{what}: connection error");
            }
        });
    }
}

async fn answer<B>(
    req: &Request<B>,
    metrics: &PrometheusHandle,
    readiness: &Readiness,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return text(
            StatusCode::NOT_FOUND,
            "not found: /metrics, /healthz, /readyz\n",
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    match path {
        "/metrics" => {
            let mut response = text(StatusCode::OK, metrics.render());
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            response
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        _ => {
            let report = readiness.check().await;
            let status = if report.ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            let mut body = serde_json::to_string(&report).expect("report serializes");
            body.push('\n');
            let mut response = text(status, body);
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            response
        }
    }
}

/// `floe healthcheck`: asks `GET path` of the endpoint at `addr` (blocking, for container
/// health checks where no HTTP client is installed). Returns the HTTP status.
///
/// Errors: no connection or no HTTP answer within `timeout`.
pub fn probe(addr: SocketAddr, path: &str, timeout: Duration) -> Result<u16, String> {
    use std::io::{Read, Write};
    let mut stream =
        std::net::TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("{addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("{addr}: {e}"))?;
    let mut head = [0u8; 12];
    stream
        .read_exact(&mut head)
        .map_err(|e| format!("{addr}: {e}"))?;
    std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{addr}: not an HTTP answer"))
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_empty_process_is_alive_but_not_ready() {
        let readiness = Readiness::default();
        let report = readiness.check().await;
        assert!(!report.ready);
        assert!(report.channels.is_empty());
    }

    #[tokio::test]
    async fn a_channel_without_leases_is_not_ready_and_one_with_a_lease_is() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = crate::catalog::open_sql_catalog(
            &dir.path().join("catalog.sqlite"),
            &dir.path().join("wh"),
            "floe",
        )
        .await
        .unwrap();
        let ident = TableIdent::new(iceberg::NamespaceIdent::new("ns".into()), "t".into());
        let (tx, rx) = watch::channel(HeldLeases::default());
        let readiness = Readiness::default();
        readiness.register("c", rx, catalog, ident);
        let report = readiness.check().await;
        assert!(!report.ready, "{report:?}");
        assert_eq!(
            report.channels[0].catalog_error.as_deref(),
            Some("table ns.t does not exist")
        );
        tx.send_modify(|h| {
            h.committer = Some(crate::lease::Lease {
                channel: "c".into(),
                key: crate::lease::LeaseKey::Committer,
                owner: Some("w".into()),
                lease_counter: 1,
                heartbeat: 0,
                checkpoint_hint: None,
                parents: vec![],
            })
        });
        let report = readiness.check().await;
        assert!(report.channels[0].committer);
        assert!(!report.ready, "the table is still missing");
        readiness.deregister("c");
        assert!(readiness.check().await.channels.is_empty());
    }
}

//! The deployment's gauges (queue depths, dead letters, live workers) as a gateway last read them
//! for a scrape: one read of every shard serves the scrapes of [`STATS_FRESH_FOR`].

use std::time::{Duration, Instant};

use conveyor_shared::metrics;
use conveyor_shared::store::ClusterStats;

/// How long the deployment's gauges read for one scrape serve the next: scrapes from several
/// Prometheus replicas, or a scraper gone wild, cost Redis one read per shard this often at most.
pub const STATS_FRESH_FOR: Duration = Duration::from_secs(2);

/// The deployment's gauges as last read, and when.
#[derive(Default)]
pub struct StatsCache(tokio::sync::Mutex<Option<(Instant, ClusterStats)>>);

impl StatsCache {
    /// The gauges, read again when older than [`STATS_FRESH_FOR`]; one read at a time.
    pub(crate) async fn get(&self, store: &conveyor_shared::Store) -> Option<ClusterStats> {
        let mut cached = self.0.lock().await;
        if let Some((at, stats)) = cached.as_ref()
            && at.elapsed() < STATS_FRESH_FOR
        {
            return Some(stats.clone());
        }
        match tokio::time::timeout(metrics::SCRAPE_REDIS_TIMEOUT, store.cluster_stats()).await {
            Ok(Ok(stats)) => {
                *cached = Some((Instant::now(), stats.clone()));
                Some(stats)
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "cannot read the deployment's gauges for a scrape");
                None
            }
            Err(_) => None,
        }
    }
}

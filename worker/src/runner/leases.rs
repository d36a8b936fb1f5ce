//! Leases and cancels: the entries of running attempts renewed in one command per stream, and
//! running attempts stopped when their task is cancelled (sharded pub/sub), re-checked whenever
//! notices may have been lost.

use super::*;

/// Renews the leases of the entries this worker runs, three times per lease; stops the runs whose
/// entry is gone (another worker took the node over).
pub(super) async fn renew_leases(worker: Worker) {
    loop {
        tokio::time::sleep(worker.options.lease / 3).await;
        let held = worker.running.held();
        if held.is_empty() {
            continue;
        }
        match worker.store.renew_leases(&worker.options.name, &held).await {
            Ok(lost) if !lost.is_empty() => {
                tracing::warn!(entries = ?lost, "lost running nodes to another worker; stopping them");
                worker.running.stop_entries(&lost, StopReason::Lost);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, held = held.len(), "could not renew leases"),
        }
    }
}

/// Stops running nodes of cancelled tasks as notices arrive; after a possible loss of notices,
/// checks every running task's status once.
pub(super) async fn listen_for_cancels(worker: Worker, shutdown: CancellationToken) {
    let hub = loop {
        match worker.store.events().await {
            Ok(hub) => break hub,
            Err(e) => {
                tracing::warn!(error = %e, "cannot subscribe to cancellations; retrying");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = shutdown.cancelled() => return,
                }
            }
        }
    };
    let mut notices = hub.cancel_notices();
    // Notices sent before the listener was registered: look once.
    recheck_running(&worker).await;
    loop {
        tokio::select! {
            notice = notices.recv() => match notice {
                Some(CancelNotice::Task(task_id)) => {
                    let stopped = worker.running.stop_task(&task_id, StopReason::Task);
                    if stopped > 0 {
                        tracing::info!(task = %task_id, nodes = stopped, "cancelling running nodes");
                    }
                }
                Some(CancelNotice::Resync) => {
                    worker.wakes.all();
                    recheck_running(&worker).await;
                }
                Some(CancelNotice::Maintain(shard)) => worker.wakes.shard(shard),
                None => return,
            },
            () = shutdown.cancelled() => return,
        }
    }
}

async fn recheck_running(worker: &Worker) {
    for task_id in worker.running.tasks() {
        match worker.store.get_task(&task_id).await {
            Ok(Some(task)) if !task.status.is_terminal() => {}
            Ok(_) => {
                worker.running.stop_task(&task_id, StopReason::Task);
            }
            Err(_) => {} // Redis is away; the next resync looks again.
        }
    }
}

/// The span of one attempt of a node: a child of its task's span, on whatever worker runs it.
pub(super) async fn cancelled_by_task(store: &Store, task_id: &str) -> bool {
    matches!(store.get_task(task_id).await, Ok(Some(t)) if t.status == TaskStatus::Cancelled)
}

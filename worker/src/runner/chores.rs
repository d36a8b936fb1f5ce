//! The chores of the tools a worker serves ([`crate::tool::Chore`]): each runs once the worker
//! has reached Redis, then on its own period, until the worker stops. One chore's slowness or
//! failure holds up no other, and none holds up the nodes.

use tokio_util::sync::CancellationToken;

use super::Worker;
use crate::tool::ChoreContext;

pub(super) async fn run_chores(worker: Worker, shutdown: CancellationToken) {
    let runs = worker.registry.chores().iter().cloned().map(|chore| {
        let cx = ChoreContext { cancel: shutdown.clone(), store: worker.store.clone() };
        async move {
            loop {
                tracing::debug!(chore = %chore.name, "running a chore");
                tokio::select! {
                    () = chore.run(cx.clone()) => {}
                    () = cx.cancel.cancelled() => return,
                }
                tokio::select! {
                    () = tokio::time::sleep(chore.every) => {}
                    () = cx.cancel.cancelled() => return,
                }
            }
        }
    });
    futures::future::join_all(runs).await;
}

//! Listing an owner's tasks (2025-11-25 `tasks/list`), oldest first, across shards. The cursor is
//! the last listed task's (creation time, id); a page continues strictly after it in that order,
//! which is also the order of each shard's index, so tasks created in the same millisecond are
//! neither skipped nor repeated. The web view reads the other end: the newest few, at once.
//!
//! A listing reads each task's status and times only ([`TASK_STATUS_FIELDS`]), never what it
//! carries: a page of finished tasks costs the same whether their results are bytes or megabytes.

use std::collections::HashMap;

use super::Store;
use crate::error::StoreError;
use crate::keys::{self, Shard};
use crate::model::{TASK_STATUS_FIELDS, TaskMode, TaskStatusRecord};

/// Which tasks a listing walks.
#[derive(Debug, Clone, Copy)]
pub enum TaskIndex<'a> {
    /// One owner's tasks, by creation time.
    Owner(&'a str),
    /// Every owner's unfinished tasks, by the time their TTL runs out (for operators).
    Live,
}

impl TaskIndex<'_> {
    fn key(&self, shard: Shard) -> String {
        match self {
            Self::Owner(owner) => shard.owner_tasks(owner),
            Self::Live => shard.expiring(),
        }
    }

    /// The highest score a listing reads: below the expiring index's pin.
    fn max_score(&self) -> String {
        match self {
            Self::Owner(_) => "+inf".to_owned(),
            Self::Live => format!("({}", keys::INDEX_PIN_SCORE),
        }
    }

    fn admits(&self, task: &TaskStatusRecord) -> bool {
        // The hidden task of a synchronous call is never the client's to see.
        if task.mode == TaskMode::Sync {
            return false;
        }
        match self {
            Self::Owner(owner) => task.owner == *owner,
            Self::Live => !task.status.is_terminal(),
        }
    }
}

/// A page of tasks and the cursor of the next one.
#[derive(Debug, Clone)]
pub struct TaskPage {
    pub tasks: Vec<TaskStatusRecord>,
    pub next_cursor: Option<String>,
}

impl Store {
    /// One page of an owner's tasks, oldest first. The cursor is opaque to clients; an invalid one
    /// is an error, not an empty page.
    pub async fn list_tasks(
        &self,
        index: TaskIndex<'_>,
        cursor: Option<&str>,
        page_size: usize,
    ) -> Result<Result<TaskPage, String>, StoreError> {
        let after = match cursor {
            None => None,
            Some(c) => match decode_cursor(c) {
                Some(position) => Some(position),
                None => {
                    return Ok(Err(format!("invalid cursor {c:?}: pass back a nextCursor from tasks/list")));
                }
            },
        };
        // One more than a page tells whether another page follows.
        let mut candidates: Vec<(u64, String, Shard)> = Vec::new();
        for shard in self.all_shards() {
            candidates.extend(self.index_after(shard, index, after.as_ref(), page_size + 1).await?);
        }
        candidates.sort();
        let more = candidates.len() > page_size;
        candidates.truncate(page_size);
        let next_cursor =
            if more { candidates.last().map(|(score, id, _)| encode_cursor(*score, id)) } else { None };
        let mut found = self.indexed_records(index, &candidates).await?;
        let tasks = candidates.into_iter().filter_map(|(_, id, _)| found.remove(&id)).collect();
        Ok(Ok(TaskPage { tasks, next_cursor }))
    }

    /// Up to `count` tasks of an index, newest first: the last ones of each shard's index (by
    /// creation time for an owner, by expiry for the live index), merged. Costs one round trip
    /// per shard for the index and one per shard for the records, however many tasks the index
    /// holds; a record that is gone or unreadable leaves the answer one shorter.
    pub async fn newest_tasks(
        &self,
        index: TaskIndex<'_>,
        count: usize,
    ) -> Result<Vec<TaskStatusRecord>, StoreError> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let newest = |shard: Shard| async move {
            let key = index.key(shard);
            let entries: Vec<(String, u64)> = self
                .query(|| {
                    redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(index.max_score())
                        .arg("-inf")
                        .arg("BYSCORE")
                        .arg("REV")
                        .arg("LIMIT")
                        .arg(0)
                        .arg(count)
                        .arg("WITHSCORES")
                        .clone()
                })
                .await?;
            Ok::<_, StoreError>(entries.into_iter().map(|(id, score)| (score, id, shard)).collect::<Vec<_>>())
        };
        let mut candidates = Vec::new();
        for entries in futures::future::join_all(self.all_shards().map(newest)).await {
            candidates.extend(entries?);
        }
        candidates.sort_by(|a, b| b.cmp(a));
        candidates.truncate(count);
        let mut found = self.indexed_records(index, &candidates).await?;
        Ok(candidates.into_iter().filter_map(|(_, id, _)| found.remove(&id)).collect())
    }

    /// The records of indexed tasks that are still there, readable, and admitted by the index, by
    /// id. Entries of an owner's index whose task is gone are removed from it.
    async fn indexed_records(
        &self,
        index: TaskIndex<'_>,
        candidates: &[(u64, String, Shard)],
    ) -> Result<HashMap<String, TaskStatusRecord>, StoreError> {
        let mut by_shard: HashMap<Shard, Vec<String>> = HashMap::new();
        for (_, id, shard) in candidates {
            by_shard.entry(*shard).or_default().push(id.clone());
        }
        let mut found: HashMap<String, TaskStatusRecord> = HashMap::new();
        for (shard, ids) in by_shard {
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.cmd("HMGET").arg(shard.task(id)).arg(&TASK_STATUS_FIELDS[..]);
            }
            // Redis's clock in the same round trip: what is past its TTL is judged by it.
            pipe.cmd("TIME");
            let mut records: Vec<redis::Value> = self.pipeline(&pipe).await?;
            let now = match records.pop().map(redis::from_redis_value::<(u64, u64)>) {
                Some(Ok(now)) => super::redis_ms(now),
                _ => return Err(StoreError::Corrupt("a listing's read of Redis's clock".to_owned())),
            };
            let mut gone = Vec::new();
            for (id, values) in ids.into_iter().zip(records) {
                let Ok(values) = redis::from_redis_value::<Vec<Option<String>>>(values) else {
                    tracing::warn!(task = %id, "leaving an unreadable task out of a listing");
                    continue;
                };
                // One unreadable record breaks only itself: it is left out of the page.
                match Self::readable(&id, values, now) {
                    Some(task) if index.admits(&task) => {
                        found.insert(id, task);
                    }
                    // Not shown, but not gone: a synchronous call that may still become the
                    // client's task, or a task of the live index that has just settled.
                    Some(_) => {}
                    None => gone.push(id),
                }
            }
            // The live index is the maintenance's to clean; an owner's index is cleaned here.
            if let (TaskIndex::Owner(owner), false) = (index, gone.is_empty()) {
                let key = shard.owner_tasks(owner);
                self.query::<()>(|| redis::Cmd::zrem(&key, &gone)).await?;
            }
        }
        Ok(found)
    }

    fn readable(id: &str, values: Vec<Option<String>>, now: u64) -> Option<TaskStatusRecord> {
        match TaskStatusRecord::from_fields(id, values) {
            Ok(task) => task.filter(|t| !t.expired_at(now)),
            Err(e) => {
                tracing::warn!(task = %id, error = %e, "leaving an unreadable task out of a listing");
                None
            }
        }
    }

    /// Up to `count` entries of an owner's index in `shard` after `after`, in index order.
    async fn index_after(
        &self,
        shard: Shard,
        index: TaskIndex<'_>,
        after: Option<&(u64, String)>,
        count: usize,
    ) -> Result<Vec<(u64, String, Shard)>, StoreError> {
        let key = index.key(shard);
        let (min, ties) = match after {
            None => ("-inf".to_owned(), 0),
            Some((score, _)) => {
                let ties: usize = self.query(|| redis::Cmd::zcount(&key, *score, *score)).await?;
                (score.to_string(), ties)
            }
        };
        let entries: Vec<(String, u64)> = self
            .query(|| {
                redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(&min)
                    .arg(index.max_score())
                    .arg("BYSCORE")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(count + ties)
                    .arg("WITHSCORES")
                    .clone()
            })
            .await?;
        Ok(entries
            .into_iter()
            .filter(|(id, score)| after.is_none_or(|(s, a)| (*score, id.as_str()) > (*s, a.as_str())))
            .take(count)
            .map(|(id, score)| (score, id, shard))
            .collect())
    }
}

fn encode_cursor(score: u64, id: &str) -> String {
    use std::fmt::Write;
    let raw = format!("{score}:{id}");
    raw.bytes().fold(String::with_capacity(raw.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn decode_cursor(cursor: &str) -> Option<(u64, String)> {
    if !cursor.len().is_multiple_of(2) || cursor.len() > 256 {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..cursor.len()).step_by(2).map(|i| u8::from_str_radix(cursor.get(i..i + 2)?, 16).ok()).collect();
    let raw = String::from_utf8(bytes?).ok()?;
    let (score, id) = raw.split_once(':')?;
    Some((score.parse().ok()?, id.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let c = encode_cursor(1_700_000_000_123, "abc");
        assert_eq!(decode_cursor(&c), Some((1_700_000_000_123, "abc".to_owned())));
        assert_eq!(decode_cursor("zz"), None);
        assert_eq!(decode_cursor("abc"), None);
        assert_eq!(decode_cursor(""), None);
    }
}

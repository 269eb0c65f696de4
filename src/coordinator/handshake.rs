//! The pre-query handshake: every worker is asked its version before a query is sent, and the
//! ones that are lost (down, frozen, unreachable) are left out for a while.
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use datafusion::common::{DataFusionError, Result};
use datafusion_distributed::{ChannelResolver, GetWorkerInfoRequest};
use url::Url;

use crate::errors::{
    as_worker_failure, is_rejected_credentials, is_worker_failure, is_worker_lost, name_worker,
    worker_failure, worker_lost, FailureKind,
};
use crate::protocol::{display_url, unreachable, worker_info, WorkerChannels};
use crate::VERSION;

/// How long a worker may take to answer the pre-query handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a lost worker is left out before it is asked again.
pub const QUARANTINE: Duration = Duration::from_secs(10);
/// How old an early handshake's answers may be when the query's planning takes them.
const EARLY_HANDSHAKE_FRESH: Duration = Duration::from_secs(2);

/// Lost workers and until when they are left out.
#[derive(Default)]
pub struct Quarantine(Mutex<HashMap<Url, Instant>>);

impl Quarantine {
    fn resting(&self, url: &Url, now: Instant) -> bool {
        self.0
            .lock()
            .expect("poisoned")
            .get(url)
            .is_some_and(|until| *until > now)
    }

    pub fn put(&self, url: &Url) {
        let until = Instant::now() + QUARANTINE;
        self.0.lock().expect("poisoned").insert(url.clone(), until);
    }

    fn release(&self, url: &Url) {
        self.0.lock().expect("poisoned").remove(url);
    }
}

/// How a probe reaches the worker.
#[derive(Clone, Copy)]
enum Connection {
    /// The kept channel: before a query, where an answer is expected.
    Kept,
    /// A new one: after a failure, when the kept channel may still hold that failure.
    New,
}

/// Asks `url` its version: a down worker or a worker of another release is reported by URL,
/// quickly, instead of failing mid-query.
/// Answers the functions the worker registered beyond DataFusion's (see `worker_info`).
async fn probe(channels: &WorkerChannels, url: &Url, over: Connection) -> Result<Functions> {
    let shown = display_url(url);
    let info = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        let mut client = match over {
            Connection::Kept => channels.get_worker_client_for_url(url).await?,
            Connection::New => channels.fresh_client(url).await?,
        };
        client.get_worker_info(GetWorkerInfoRequest {}).await
    })
    .await;
    match info {
        Err(_) => Err(worker_lost(
            shown,
            FailureKind::StoppedAnswering,
            format!(
                "stopped answering (no handshake answer within {} s)",
                HANDSHAKE_TIMEOUT.as_secs()
            ),
        )),
        Ok(Err(e)) if is_worker_failure(&e) || is_rejected_credentials(&e) => {
            Err(name_worker(shown, e))
        }
        Ok(Err(e)) => Err(unreachable(url, &e).await),
        Ok(Ok(info)) => match worker_info::parse(&info.version) {
            (VERSION, functions) => Ok(functions),
            (version, _) => Err(worker_failure(
                Some(shown),
                FailureKind::VersionMismatch,
                format!(
                    "runs datafusion-distributed-py {}, but this coordinator runs \
                         {VERSION}; run the same release on the coordinator and every worker",
                    if version.is_empty() {
                        "<unknown>"
                    } else {
                        version
                    }
                ),
            )),
        },
    }
}

/// The functions a worker registered beyond DataFusion's built-ins.
pub type Functions = BTreeSet<String>;

/// The workers of `urls` a query may use now, with their functions. Each is asked its version; a lost one is left
/// out with a warning and quarantined for [`QUARANTINE`] (not asked again until then). Fails
/// when fewer than `min_workers` remain, or when a worker refuses us (credentials, version):
/// those do not heal by waiting.
pub async fn usable_workers(
    channels: &WorkerChannels,
    urls: &[Url],
    quarantine: &Quarantine,
    min_workers: usize,
) -> Result<Vec<(Url, Functions)>> {
    let now = Instant::now();
    let (resting, fresh): (Vec<&Url>, Vec<&Url>) =
        urls.iter().partition(|u| quarantine.resting(u, now));
    let mut usable = Vec::new();
    let mut lost = Vec::new();
    let mut asked = fresh;
    // Too few without the quarantined ones: ask them again before giving up.
    if urls.len() - resting.len() < min_workers.max(1) {
        asked.extend(resting.iter().copied());
    }
    let answers = futures::future::join_all(
        asked
            .iter()
            .map(|url| probe(channels, url, Connection::Kept)),
    )
    .await;
    for (url, answer) in asked.into_iter().zip(answers) {
        match answer {
            Ok(functions) => {
                quarantine.release(url);
                usable.push((url.clone(), functions));
            }
            Err(e) if is_worker_lost(&e) => {
                quarantine.put(url);
                lost.push(e);
            }
            Err(e) => return Err(e),
        }
    }
    usable.sort_by_key(|(u, _)| urls.iter().position(|x| x == u));
    if usable.len() < min_workers.max(1) {
        return Err(too_few(lost, usable.len(), urls.len(), min_workers));
    }
    for e in lost.iter().filter_map(as_worker_failure) {
        log::warn!(
            "{e}; this query runs on the other {} workers (it is asked again in {} s)",
            usable.len(),
            QUARANTINE.as_secs()
        );
    }
    Ok(usable)
}

/// The usable workers of a query, with their functions (see [`usable_workers`]).
pub type Usable = Vec<(Url, Functions)>;

/// A query's handshake, started as soon as the query is asked for: datafusion-python's
/// physical planning and encoding of the query, done meanwhile, take longer than the workers'
/// answers over a network. The query's first planning takes it, if soon enough; every other
/// planning (a run again, a late one) asks the workers itself.
pub struct EarlyHandshake {
    started: Instant,
    urls: Vec<Url>,
    answers: Mutex<Option<tokio::task::JoinHandle<Result<Usable>>>>,
}

impl EarlyHandshake {
    pub fn new(urls: Vec<Url>, answers: tokio::task::JoinHandle<Result<Usable>>) -> Self {
        Self {
            started: Instant::now(),
            urls,
            answers: Mutex::new(Some(answers)),
        }
    }

    /// The workers it asked and their answers (to await), once, while they are fresh.
    pub fn take(&self) -> Option<(Vec<Url>, tokio::task::JoinHandle<Result<Usable>>)> {
        let answers = self.answers.lock().expect("poisoned").take()?;
        (self.started.elapsed() <= EARLY_HANDSHAKE_FRESH).then(|| (self.urls.clone(), answers))
    }
}

/// The answers of an early handshake's task.
pub async fn answers_of(task: tokio::task::JoinHandle<Result<Usable>>) -> Result<Usable> {
    task.await
        .map_err(|e| DataFusionError::Internal(format!("the workers' handshake failed: {e}")))?
}

/// The workers of `urls` that are lost now, as the errors saying so (asked in parallel, each
/// over a new connection).
pub async fn lost_workers(channels: &WorkerChannels, urls: &[Url]) -> Vec<DataFusionError> {
    let answers =
        futures::future::join_all(urls.iter().map(|url| probe(channels, url, Connection::New)))
            .await;
    answers
        .into_iter()
        .filter_map(|a| a.err().filter(is_worker_lost))
        .collect()
}

fn too_few(
    mut lost: Vec<DataFusionError>,
    usable: usize,
    total: usize,
    min_workers: usize,
) -> DataFusionError {
    let first = match lost.len() {
        0 => {
            return worker_failure(
                None,
                FailureKind::Refused,
                format!("worker set: no workers ({usable} of {total})"),
            )
        }
        _ => lost.remove(0),
    };
    if total == 1 {
        return first;
    }
    let failure = as_worker_failure(&first).expect("lost workers are worker failures");
    let others = lost
        .iter()
        .filter_map(|e| as_worker_failure(e).and_then(|f| f.worker.clone()))
        .collect::<Vec<_>>();
    let also = match others.is_empty() {
        true => String::new(),
        false => format!("; also lost: {}", others.join(", ")),
    };
    worker_failure(
        failure.worker.as_deref(),
        failure.kind,
        format!(
            "{}{also}; {usable} of {total} workers reachable, fewer than min_workers={}",
            failure.what,
            min_workers.max(1)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(urls: &[Url]) -> tokio::task::JoinHandle<Result<Usable>> {
        let usable = urls.iter().map(|u| (u.clone(), Functions::new())).collect();
        tokio::spawn(async move { Ok(usable) })
    }

    #[tokio::test]
    async fn an_early_handshake_is_taken_once() {
        let urls = vec![Url::parse("http://127.0.0.1:1").unwrap()];
        let early = EarlyHandshake::new(urls.clone(), answered(&urls));
        let (asked, answers) = early.take().expect("fresh");
        assert_eq!(asked, urls);
        assert_eq!(answers_of(answers).await.unwrap()[0].0, urls[0]);
        // A planning again (a retry, a second run) asks the workers itself.
        assert!(early.take().is_none());
    }

    #[tokio::test]
    async fn a_stale_early_handshake_is_not_taken() {
        let urls = vec![Url::parse("http://127.0.0.1:1").unwrap()];
        let mut early = EarlyHandshake::new(urls.clone(), answered(&urls));
        early.started -= EARLY_HANDSHAKE_FRESH + Duration::from_millis(1);
        assert!(early.take().is_none());
    }
}

//! Operations that outlive a dropped request just long enough to clean up.
//!
//! tonic drops a handler's future when its client goes away (a reset stream, a closed
//! connection, an expired `grpc-timeout`). A Lock or a Campaign must not stop at an
//! arbitrary await then: a write already proposed still commits, and a waiter's key
//! would stay behind and block every later waiter until its lease ends. So these run
//! on a task of their own ([`detached`]) that learns of the drop through a
//! [`Cancellation`]: it gives up its waits at once and removes its key, as etcd's
//! Mutex.Lock and Election.Campaign do when their context is cancelled.

use std::future::Future;

use tokio::sync::oneshot;

use super::ConcurrencyError;

/// Tells a detached operation that its request was dropped.
pub struct Cancellation(oneshot::Sender<()>);

impl Cancellation {
    /// Resolves once the request is dropped.
    pub async fn cancelled(&mut self) {
        self.0.closed().await;
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.is_closed()
    }

    /// `work`, unless the request is dropped first (then `work` is dropped: only reads
    /// and waits are given here, never a write whose outcome matters).
    pub async fn unless_cancelled<T>(
        &mut self,
        work: impl Future<Output = Result<T, ConcurrencyError>>,
    ) -> Result<T, ConcurrencyError> {
        tokio::select! {
            biased;
            () = self.cancelled() => Err(ConcurrencyError::Cancelled),
            done = work => done,
        }
    }
}

/// Runs `work` on a task of its own and waits for it; dropping the returned future
/// cancels `work` through its [`Cancellation`] instead of abandoning it mid-way.
pub async fn detached<T, F>(work: impl FnOnce(Cancellation) -> F) -> Result<T, ConcurrencyError>
where
    F: Future<Output = Result<T, ConcurrencyError>> + Send + 'static,
    T: Send + 'static,
{
    let (cancel, request) = oneshot::channel();
    let task = tokio::spawn(work(Cancellation(cancel)));
    // Held until the task is done, and dropped with this future if it is dropped.
    let _request: oneshot::Receiver<()> = request;
    task.await
        .map_err(|e| ConcurrencyError::Internal(format!("concurrency task: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dropped_request_cancels_its_work_and_lets_it_clean_up() {
        let (cleaned, cleaned_rx) = oneshot::channel();
        let request = detached(move |mut cancel| async move {
            let waited = cancel
                .unless_cancelled(std::future::pending::<Result<(), _>>())
                .await;
            let _ = cleaned.send(matches!(waited, Err(ConcurrencyError::Cancelled)));
            waited
        });
        // The request gives up (its client went away) while the work waits.
        let _ = tokio::time::timeout(std::time::Duration::from_millis(10), request).await;
        assert_eq!(cleaned_rx.await, Ok(true));
    }

    #[tokio::test]
    async fn finished_work_is_returned() {
        let answer = detached(|_cancel| async { Ok::<_, ConcurrencyError>(7) }).await;
        assert!(matches!(answer, Ok(7)));
    }
}

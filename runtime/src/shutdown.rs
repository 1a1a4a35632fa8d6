//! The stop signal both programs obey: SIGTERM (what Kubernetes sends) or SIGINT (ctrl-c).

use std::future::Future;

/// Resolves on the first SIGTERM or SIGINT. Where SIGTERM cannot be listened for (not a
/// Unix system, or the handler cannot be installed), on SIGINT alone.
///
/// Called inside a tokio runtime, the SIGTERM handler is installed at once, not when the
/// future is first polled: a program polls it only once its pipeline runs, and a SIGTERM
/// that came before (Kubernetes stopping a pod that had just turned ready) would otherwise
/// kill the process with the default action, without draining and with a failure status.
pub fn signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    let term = tokio::runtime::Handle::try_current()
        .ok()
        .and_then(|_| terminate_handler());
    async move {
        #[cfg(unix)]
        {
            if let Some(mut term) = term.or_else(terminate_handler) {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
                return;
            }
        }
        // A failed ctrl-c handler leaves nothing to wait for; stopping then is the safe side.
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(unix)]
fn terminate_handler() -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{signal, SignalKind};
    signal(SignalKind::terminate()).ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[tokio::test]
    async fn a_sigterm_sent_before_the_signal_is_first_awaited_still_resolves_it() {
        // Installed when called: the process survives a SIGTERM that comes before the
        // future is polled (with the default action it would die here).
        let stop = super::signal();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        tokio::time::sleep(Duration::from_millis(100)).await;
        tokio::time::timeout(Duration::from_secs(5), stop)
            .await
            .expect("the early SIGTERM resolves the signal");
    }

    #[tokio::test]
    async fn sigterm_resolves_the_signal() {
        let waiting = tokio::spawn(super::signal());
        // Let the task install its handler before the signal is sent.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("SIGTERM did not resolve the signal")
            .unwrap();
    }
}

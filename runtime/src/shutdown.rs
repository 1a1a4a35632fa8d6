//! The stop signal both programs obey: SIGTERM (what Kubernetes sends) or SIGINT (ctrl-c).

/// Resolves on the first SIGTERM or SIGINT. Where SIGTERM cannot be listened for (not a
/// Unix system, or the handler cannot be installed), on SIGINT alone.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

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

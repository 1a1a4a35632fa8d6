//! A simulated Kubernetes API server for ipaudit's tests: real HTTP on 127.0.0.1, list and
//! watch of every kind of ipaudit's table (`ipaudit_schemas::KINDS`: Pods, kube-ovn IPs and
//! Subnets, whereabouts IPPools and OverlappingRangeIPReservations, spiderpool
//! SpiderIPPools and SpiderEndpoints), or only some of them ([`SimConfig::kinds`]: "a
//! cluster with only whereabouts"), one resourceVersion counter for all kinds, bookmarks,
//! in-stream 410 Gone for expired versions, finalizer and deletionTimestamp semantics,
//! get, patch (merge, and JSON patch with `test`), replace and delete, and the discovery
//! endpoints kube-rs and kubectl read, listing only the kinds served. The `kube-system`
//! Namespace answers with a configurable uid ([`SimConfig::cluster_uid`]), the cluster's
//! identity; a DELETE honours `DeleteOptions.preconditions` (uid, resourceVersion).
//!
//! Tests drive the cluster through [`KubeSim`] (as controllers and users would) and break it
//! on purpose: [`KubeSim::cut_watches`], [`KubeSim::expire_history`]. A kind is named by
//! its stream ([`Kind`]); calls about a kind the server does not serve answer 404.

pub mod kinds;
mod server;
mod store;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

pub use kinds::{Kind, Served};
pub use server::{SimConfig, DEFAULT_CLUSTER_UID};
pub use store::{ApiError, Mutation, PatchType, Preconditions};

use server::Shared;

/// A running simulated API server. Dropping it stops the server.
pub struct KubeSim {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl KubeSim {
    /// Starts a server on a free port of 127.0.0.1 (inside a tokio runtime).
    pub async fn start(config: SimConfig) -> std::io::Result<KubeSim> {
        Self::start_on(config, SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts a server on `addr`.
    pub async fn start_on(config: SimConfig, addr: SocketAddr) -> std::io::Result<KubeSim> {
        let shared = Arc::new(Shared::new(config));
        let (addr, stop) = server::serve(Arc::clone(&shared), addr).await?;
        Ok(KubeSim {
            shared,
            addr,
            stop: Some(stop),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Writes a kubeconfig that points at this server (for kube-rs and kubectl).
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, kubeconfig(&self.url()))
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store().resource_version()
    }

    /// The kinds served, in table order.
    pub fn served(&self) -> &Served {
        &self.shared.served
    }

    /// Creates an object, as `kubectl create` would.
    pub fn create(&self, kind: Kind, namespace: &str, object: Value) -> Result<Value, ApiError> {
        let kind = self.shared.spec(kind)?;
        self.shared.store().create(kind, namespace, object)
    }

    /// Stores JSON as an object without any validation (malformed objects).
    pub fn put_raw(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        object: Value,
    ) -> Result<Value, ApiError> {
        let kind = self.shared.spec(kind)?;
        Ok(self.shared.store().put_raw(kind, namespace, name, object))
    }

    /// Changes an object in place, as a controller's update would.
    pub fn update(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) -> Result<Value, ApiError> {
        let kind = self.shared.spec(kind)?;
        self.shared.store().update(kind, namespace, name, change)
    }

    /// Patches an object.
    pub fn patch(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch_type: PatchType,
        body: &Value,
    ) -> Result<Value, ApiError> {
        let kind = self.shared.spec(kind)?;
        self.shared
            .store()
            .patch(kind, namespace, name, patch_type, body)
    }

    /// Deletes an object (with finalizers: marks it with a deletionTimestamp).
    pub fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let kind = self.shared.spec(kind)?;
        self.shared.store().delete(kind, namespace, name)
    }

    /// Removes every finalizer of an object, as its controller would when done.
    pub fn remove_finalizers(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.update(kind, namespace, name, |o| {
            if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("finalizers".into(), Value::Array(Vec::new()));
            }
        })
    }

    /// One object.
    pub fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let kind = self.shared.spec(kind)?;
        self.shared.store().get(kind, namespace, name)
    }

    /// Every object of a kind (none for a kind not served).
    pub fn list(&self, kind: Kind) -> Vec<Value> {
        match self.shared.spec(kind) {
            Ok(kind) => self.shared.store().list(kind, None).0,
            Err(_) => Vec::new(),
        }
    }

    /// Ends every open watch connection (clients must re-watch).
    pub fn cut_watches(&self) {
        self.shared.cut.send_modify(|generation| *generation += 1);
    }

    /// Every change since the start, in order: what a complete recording holds.
    pub fn journal(&self) -> Vec<Mutation> {
        self.shared.store().journal().to_vec()
    }

    /// Refuses list and watch requests with 503 until [`KubeSim::resume`], and ends the
    /// open watches: clients see the API server go away.
    pub fn pause(&self) {
        self.shared
            .watches_paused
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.cut_watches();
    }

    /// Serves lists and watches again.
    pub fn resume(&self) {
        self.shared
            .watches_paused
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Makes every request about `kind` (list, watch, get, writes) answer the 404 of a
    /// resource type the server does not know, whose Status names no object, as while its
    /// CRD is being reinstalled; its objects are kept. [`KubeSim::restore_kind`] ends it.
    pub fn withdraw_kind(&self, kind: Kind) {
        let mut withdrawn = self
            .shared
            .withdrawn
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !withdrawn.contains(&kind) {
            withdrawn.push(kind);
        }
    }

    /// Serves `kind` again after [`KubeSim::withdraw_kind`].
    pub fn restore_kind(&self, kind: Kind) {
        self.shared
            .withdrawn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k| *k != kind);
    }

    /// Refuses list and watch requests of one kind with 503 until [`KubeSim::heal`], and
    /// ends the open watches (the other kinds' clients simply watch again).
    pub fn fail_kind(&self, kind: Kind) {
        self.shared
            .failing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(kind);
        self.cut_watches();
    }

    /// Serves lists and watches of a kind failed by [`KubeSim::fail_kind`] again.
    pub fn heal(&self, kind: Kind) {
        self.shared
            .failing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&kind);
    }

    /// Makes the watches of `kind` send each change `delay` after it was made (zero: at
    /// once), as a watch that lags behind its API server does: a client then lists objects
    /// whose changes its watch has not brought yet.
    pub fn delay_watch_events(&self, kind: Kind, delay: std::time::Duration) {
        self.shared
            .watch_delays
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(kind, delay);
    }

    /// Forgets the history: watches from any earlier version get 410 Gone.
    pub fn expire_history(&self) {
        self.shared.store().expire_history();
    }

    /// Stops the server.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.cut_watches();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for KubeSim {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A kubeconfig for a plain-HTTP server with no authentication.
pub fn kubeconfig(url: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: sim
  cluster:
    server: {url}
contexts:
- name: sim
  context:
    cluster: sim
    user: sim
current-context: sim
users:
- name: sim
  user: {{}}
"
    )
}

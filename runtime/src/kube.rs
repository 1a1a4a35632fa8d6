//! Listing a kind from the API server in pages, as the collector's relist and the kubectl
//! plugin's one-shot snapshot both do: `limit` objects a page, the `continue` token of
//! each page asks for the next, and the first page's `metadata.resourceVersion` is the
//! version the whole list was served at (where a watch resumes). [`PagedList::exactly_at`]
//! lists the collection as it was at a given version instead (`resourceVersionMatch=Exact`),
//! the collector's snapshot beside its running watch. Objects stay raw JSON:
//! each program decodes them leniently itself (a typed object would lose a whole event
//! over one mistyped field).
//!
//! Behind the cargo feature `kube` (the analyzer does not talk to the API server).

use ::kube::api::{ListParams, VersionMatch};
use ::kube::core::Request;
use ::kube::Client;
use serde_json::Value;

/// One kind's list, read a page at a time with [`PagedList::next_page`].
pub struct PagedList {
    client: Client,
    path: String,
    page_size: u32,
    token: Option<String>,
    resource_version: Option<String>,
    /// The version the first page must be served at exactly, if one was asked for.
    exact: Option<String>,
    done: bool,
}

impl PagedList {
    /// The list of the collection at `path` (e.g. `/api/v1/pods`), `page_size` objects a
    /// page (`client` is a cheap clone of the caller's).
    pub fn new(client: Client, path: impl Into<String>, page_size: u32) -> Self {
        PagedList {
            client,
            path: path.into(),
            page_size,
            token: None,
            resource_version: None,
            exact: None,
            done: false,
        }
    }

    /// The list of the collection at `path` as it was at `resource_version` exactly. The
    /// API server refuses a version it no longer has (410 Expired, as for a watch).
    pub fn exactly_at(
        client: Client,
        path: impl Into<String>,
        page_size: u32,
        resource_version: &str,
    ) -> Self {
        PagedList {
            exact: Some(resource_version.to_owned()),
            ..PagedList::new(client, path, page_size)
        }
    }

    /// The objects of the next page; `None` once the last page has been read. An error
    /// (the API server's or the network's) leaves the list where it was: the caller
    /// starts a new list (a `continue` token may have expired meanwhile).
    pub async fn next_page(&mut self) -> Option<Result<Vec<Value>, ::kube::Error>> {
        if self.done {
            return None;
        }
        let mut params = ListParams::default().limit(self.page_size);
        match (&self.token, &self.exact) {
            // The continue token carries the version; the API server refuses both at once.
            (Some(token), _) => params = params.continue_token(token),
            (None, Some(rv)) => params = params.at(rv).matching(VersionMatch::Exact),
            (None, None) => {}
        }
        let page = match self.request(&params).await {
            Ok(page) => page,
            Err(error) => return Some(Err(error)),
        };
        if self.resource_version.is_none() {
            self.resource_version = page
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        self.token = page
            .pointer("/metadata/continue")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        self.done = self.token.is_none();
        let items = match page {
            Value::Object(mut page) => match page.remove("items") {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        Some(Ok(items))
    }

    /// The resourceVersion the list was served at (from its first page), once read.
    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    async fn request(&self, params: &ListParams) -> Result<Value, ::kube::Error> {
        let request = Request::new(&self.path)
            .list(params)
            .map_err(::kube::Error::BuildRequest)?;
        self.client.request::<Value>(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_sim::{Kind, KubeSim, SimConfig};
    use serde_json::json;

    async fn client(sim: &KubeSim) -> Client {
        let mut config = ::kube::Config::new(sim.url().parse().unwrap());
        // As the collector's watch client: a 503 reaches the caller at once instead of
        // being retried inside the request for minutes.
        config.default_retry = false;
        Client::try_from(config).unwrap()
    }

    fn pod(name: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"nodeName": "node-1"}})
    }

    #[tokio::test]
    async fn every_object_comes_once_across_pages_with_the_lists_version() {
        let sim = KubeSim::start(SimConfig::default()).await.unwrap();
        for i in 0..7 {
            sim.create(Kind::Pod, "default", pod(&format!("p{i}")))
                .unwrap();
        }
        let listed_at = sim.resource_version().to_string();
        let client = client(&sim).await;
        let mut list = PagedList::new(client, "/api/v1/pods", 3);
        let mut pages = Vec::new();
        while let Some(page) = list.next_page().await {
            pages.push(page.unwrap());
        }
        assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 1]);
        let mut names: Vec<&str> = pages
            .iter()
            .flatten()
            .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["p0", "p1", "p2", "p3", "p4", "p5", "p6"]);
        assert_eq!(list.resource_version(), Some(listed_at.as_str()));
        assert!(list.next_page().await.is_none());
    }

    #[tokio::test]
    async fn a_list_exactly_at_a_version_shows_every_page_as_it_was_then() {
        let sim = KubeSim::start(SimConfig::default()).await.unwrap();
        for i in 0..5 {
            sim.create(Kind::Pod, "default", pod(&format!("p{i}")))
                .unwrap();
        }
        let then = sim.resource_version().to_string();
        sim.delete(Kind::Pod, "default", "p0").unwrap();
        sim.create(Kind::Pod, "default", pod("p9")).unwrap();
        let client = client(&sim).await;
        let mut list = PagedList::exactly_at(client, "/api/v1/pods", 2, &then);
        let mut names = Vec::new();
        while let Some(page) = list.next_page().await {
            let page = page.unwrap();
            names.extend(page.iter().filter_map(|o| {
                o.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            }));
        }
        assert_eq!(names, ["p0", "p1", "p2", "p3", "p4"]);
        assert_eq!(list.resource_version(), Some(then.as_str()));
    }

    #[tokio::test]
    async fn a_list_exactly_at_an_expired_version_is_a_410() {
        let sim = KubeSim::start(SimConfig::default()).await.unwrap();
        sim.create(Kind::Pod, "default", pod("p0")).unwrap();
        let then = sim.resource_version().to_string();
        sim.create(Kind::Pod, "default", pod("p1")).unwrap();
        sim.expire_history();
        let client = client(&sim).await;
        let mut list = PagedList::exactly_at(client, "/api/v1/pods", 2, &then);
        match list.next_page().await {
            Some(Err(::kube::Error::Api(status))) => assert_eq!(status.code, 410),
            other => panic!("expected a 410, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_empty_collection_is_one_empty_page() {
        let sim = KubeSim::start(SimConfig::default()).await.unwrap();
        let client = client(&sim).await;
        let mut list = PagedList::new(client, "/api/v1/pods", 3);
        assert_eq!(
            list.next_page().await.unwrap().unwrap(),
            Vec::<Value>::new()
        );
        assert!(list.next_page().await.is_none());
        assert!(list.resource_version().is_some());
    }

    #[tokio::test]
    async fn a_failing_list_is_an_error_not_an_end() {
        let sim = KubeSim::start(SimConfig::default()).await.unwrap();
        sim.fail_kind(Kind::Pod);
        let client = client(&sim).await;
        let mut list = PagedList::new(client, "/api/v1/pods", 3);
        assert!(matches!(list.next_page().await, Some(Err(_))));
    }
}

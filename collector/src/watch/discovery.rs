//! Which kinds to watch: the kinds of the table ([`ipaudit_schemas::KINDS`]) that the API
//! server serves, narrowed by `--kinds`. Discovery asks each group/version of the table
//! (`/apis/<group>/<version>`, `/api/v1`) which resources it serves; a group that answers
//! 404 is not installed. Pods are always watched (every IPAM's rules read them) and at
//! least one IPAM kind must be, so that a cluster with only whereabouts, or only
//! spiderpool, works and a cluster with none fails at start with an error that says what
//! was looked for.

use std::collections::hash_map::{Entry, HashMap};

use ipaudit_schemas::{Ipam, KindSpec, Stream, KINDS};
use kube::Client;
use tracing::warn;

/// Why the kinds to watch could not be chosen. Only [`DiscoveryError::Kube`] may pass on
/// a retry; the others need an operator: install the IPAM's CRDs, or change `--kinds`.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// Discovery itself failed (network, authentication, a 5xx): retryable.
    #[error("cannot ask the API server which resources {api_version} serves")]
    Kube {
        /// The group/version asked about (`whereabouts.cni.cncf.io/v1alpha1`, `v1`).
        api_version: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Kinds that must be watched (named in `--kinds`, or Pods) are not served.
    #[error("{}", not_served_message(.kinds))]
    NotServed {
        /// The kinds missing, in table order.
        kinds: Vec<&'static KindSpec>,
    },
    /// The API server serves no IPAM kind of the table.
    #[error(
        "the API server serves none of the IPAM kinds ipaudit watches (looked for {}): is {} installed?",
        resource_list(.looked_for),
        ipam_names()
    )]
    NoIpamServed {
        /// Every IPAM kind of the table.
        looked_for: Vec<&'static KindSpec>,
    },
    /// `--kinds` names no IPAM kind: Pods alone find nothing.
    #[error(
        "--kinds names no IPAM kind: add at least one of {}",
        resource_list(.choices)
    )]
    NoIpamChosen {
        /// The IPAM kinds the API server serves.
        choices: Vec<&'static KindSpec>,
    },
}

/// `ippools.whereabouts.cni.cncf.io/v1alpha1`: the resource and the version it is watched at.
pub fn served_name(kind: &KindSpec) -> String {
    format!("{}/{}", kind.resource(), kind.version)
}

fn resource_list(kinds: &[&'static KindSpec]) -> String {
    kinds
        .iter()
        .map(|k| served_name(k))
        .collect::<Vec<_>>()
        .join(", ")
}

/// "kube-ovn, whereabouts, spiderpool, calico or cilium", from the table.
fn ipam_names() -> String {
    let mut names: Vec<&str> = Vec::new();
    for ipam in KINDS.iter().filter_map(|k| k.ipam) {
        if !names.contains(&ipam.as_str()) {
            names.push(ipam.as_str());
        }
    }
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "an IPAM".to_owned(),
    }
}

fn not_served_message(kinds: &[&'static KindSpec]) -> String {
    let mut ipams: Vec<&str> = kinds
        .iter()
        .filter_map(|k| k.ipam.map(|i| i.as_str()))
        .collect();
    ipams.dedup();
    let hint = if ipams.is_empty() {
        "is this a Kubernetes API server?".to_owned()
    } else {
        format!("is {} installed?", ipams.join(" and "))
    };
    format!(
        "the API server does not serve {}: {hint}",
        resource_list(kinds)
    )
}

/// The streams of the table whose resource the API server serves, in table order.
pub async fn served_streams(client: &Client) -> Result<Vec<Stream>, DiscoveryError> {
    // Several kinds share a group/version: ask once per group/version.
    let mut served_by_version: HashMap<String, Vec<String>> = HashMap::new();
    let mut served = Vec::new();
    for kind in KINDS {
        let plurals = match served_by_version.entry(kind.api_version()) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(unknown) => unknown.insert(served_plurals(client, kind).await?),
        };
        if plurals.iter().any(|p| p == kind.plural) {
            served.push(kind.stream);
        }
    }
    Ok(served)
}

/// The resources one group/version serves; none when the API server does not know it.
async fn served_plurals(client: &Client, kind: &KindSpec) -> Result<Vec<String>, DiscoveryError> {
    let list = if kind.group.is_empty() {
        client.list_core_api_resources(kind.version).await
    } else {
        client.list_api_group_resources(&kind.api_version()).await
    };
    match list {
        // Subresources (`spiderippools/status`) are listed too; they never equal a plural.
        Ok(list) => Ok(list.resources.into_iter().map(|r| r.name).collect()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
        Err(source) => Err(DiscoveryError::Kube {
            api_version: kind.api_version(),
            source,
        }),
    }
}

/// The kinds to watch, in table order, given what the API server serves.
///
/// `requested` is `--kinds` (`None`: every served kind). Kinds every IPAM reads (Pods) are
/// always added, and kinds some IPAMs read (Nodes, for Calico and Cilium) whenever a kind
/// of one of those IPAMs is chosen. A requested kind that is not served is an error; so
/// is a selection with no IPAM kind. Without `--kinds`, an IPAM served only in part (in an
/// API group it serves) is watched in part, with a warning (its rules then see half the
/// story).
pub fn choose(
    served: &[Stream],
    requested: Option<&[Stream]>,
) -> Result<Vec<&'static KindSpec>, DiscoveryError> {
    let is_served = |k: &KindSpec| served.contains(&k.stream);
    let is_requested = |k: &KindSpec| match requested {
        Some(names) => names.contains(&k.stream),
        None => is_served(k),
    };
    let ipams_chosen: Vec<Ipam> = KINDS
        .iter()
        .filter(|k| is_requested(k))
        .filter_map(|k| k.ipam)
        .collect();
    let chosen: Vec<&'static KindSpec> = KINDS
        .iter()
        .filter(|k| match k.ipam {
            Some(_) => is_requested(k),
            None if k.read_by.is_empty() => true,
            None => {
                requested.is_some_and(|names| names.contains(&k.stream))
                    || k.read_by.iter().any(|ipam| ipams_chosen.contains(ipam))
            }
        })
        .collect();
    let missing: Vec<&'static KindSpec> =
        chosen.iter().copied().filter(|k| !is_served(k)).collect();
    if !missing.is_empty() {
        return Err(DiscoveryError::NotServed { kinds: missing });
    }
    if !chosen.iter().any(|k| k.ipam.is_some()) {
        let served_ipam: Vec<&'static KindSpec> = KINDS
            .iter()
            .filter(|k| k.ipam.is_some() && is_served(k))
            .collect();
        return Err(match requested {
            Some(_) if !served_ipam.is_empty() => DiscoveryError::NoIpamChosen {
                choices: served_ipam,
            },
            _ => DiscoveryError::NoIpamServed {
                looked_for: KINDS.iter().filter(|k| k.ipam.is_some()).collect(),
            },
        });
    }
    if requested.is_none() {
        for kind in KINDS.iter().filter(|k| !is_served(k)) {
            let Some(ipam) = kind.ipam else { continue };
            // Calico serves its kinds in one API group or the other: only a kind missing
            // from a group that serves others is missing.
            if chosen
                .iter()
                .any(|c| c.ipam == Some(ipam) && c.group == kind.group)
            {
                warn!(%ipam, missing = %served_name(kind),
                    "this IPAM is served only in part: its other kinds are watched without this one");
            }
        }
    }
    Ok(chosen)
}

/// Discovery, then [`choose`].
pub async fn discover(
    client: &Client,
    requested: Option<&[Stream]>,
) -> Result<Vec<&'static KindSpec>, DiscoveryError> {
    let served = served_streams(client).await?;
    choose(&served, requested)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipaudit_schemas::kinds;

    fn streams(names: &[&str]) -> Vec<Stream> {
        names
            .iter()
            .map(|n| kinds::named(n).expect("a kind of the table").stream)
            .collect()
    }

    fn resources(kinds: &[&'static KindSpec]) -> Vec<String> {
        kinds.iter().map(|k| k.resource()).collect()
    }

    #[test]
    fn by_default_every_served_kind_is_watched() {
        let served = streams(&["pods", "ippools", "overlappingrangeipreservations"]);
        let chosen = choose(&served, None).unwrap();
        assert_eq!(
            resources(&chosen),
            [
                "pods",
                "ippools.whereabouts.cni.cncf.io",
                "overlappingrangeipreservations.whereabouts.cni.cncf.io"
            ]
        );
    }

    #[test]
    fn a_cluster_with_only_spiderpool_works() {
        let served = streams(&["pods", "spiderippools", "spiderendpoints"]);
        let chosen = choose(&served, None).unwrap();
        assert_eq!(chosen.len(), 3);
        assert!(chosen
            .iter()
            .all(|k| k.ipam.is_none_or(|i| i.as_str() == "spiderpool")));
    }

    #[test]
    fn pods_are_watched_even_when_kinds_does_not_name_them() {
        let served = kinds::streams().collect::<Vec<_>>();
        let chosen = choose(&served, Some(&streams(&["IPPool"]))).unwrap();
        assert_eq!(
            resources(&chosen),
            ["pods", "ippools.whereabouts.cni.cncf.io"]
        );
    }

    #[test]
    fn a_named_kind_the_server_does_not_serve_is_an_error_naming_the_crd() {
        let served = streams(&["pods", "ips", "subnets"]);
        let error = choose(&served, Some(&streams(&["ippools"]))).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the API server does not serve ippools.whereabouts.cni.cncf.io/v1alpha1: is whereabouts installed?"
        );
    }

    #[test]
    fn no_ipam_served_lists_what_was_looked_for() {
        let error = choose(&streams(&["pods"]), None).unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, DiscoveryError::NoIpamServed { .. }));
        for kind in KINDS.iter().filter(|k| k.ipam.is_some()) {
            assert!(text.contains(&served_name(kind)), "{text}");
        }
        assert!(
            text.ends_with("is kube-ovn, whereabouts, spiderpool, calico or cilium installed?"),
            "{text}"
        );
    }

    #[test]
    fn a_calico_cluster_watches_its_api_group_and_nodes_and_a_kube_ovn_one_no_nodes() {
        let served = streams(&[
            "pods",
            "nodes",
            "ipamblocks.crd.projectcalico.org",
            "ipamhandles.crd.projectcalico.org",
            "blockaffinities.crd.projectcalico.org",
            "ippools.crd.projectcalico.org",
        ]);
        let chosen = choose(&served, None).unwrap();
        assert_eq!(
            resources(&chosen),
            [
                "pods",
                "nodes",
                "ipamblocks.crd.projectcalico.org",
                "ipamhandles.crd.projectcalico.org",
                "blockaffinities.crd.projectcalico.org",
                "ippools.crd.projectcalico.org",
            ]
        );
        let kube_ovn = choose(&streams(&["pods", "nodes", "ips", "subnets"]), None).unwrap();
        assert_eq!(
            resources(&kube_ovn),
            ["pods", "ips.kubeovn.io", "subnets.kubeovn.io"]
        );
        let cilium = choose(
            &kinds::streams().collect::<Vec<_>>(),
            Some(&streams(&["ciliumendpoints"])),
        )
        .unwrap();
        assert_eq!(
            resources(&cilium),
            ["pods", "nodes", "ciliumendpoints.cilium.io"]
        );
    }

    #[test]
    fn pods_not_served_is_an_error() {
        let error = choose(&streams(&["ips", "subnets"]), None).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the API server does not serve pods/v1: is this a Kubernetes API server?"
        );
    }

    #[test]
    fn kinds_naming_only_pods_is_an_error_offering_the_served_ipam_kinds() {
        let served = streams(&["pods", "spiderippools"]);
        let error = choose(&served, Some(&streams(&["pods"]))).unwrap_err();
        assert_eq!(
            error.to_string(),
            "--kinds names no IPAM kind: add at least one of spiderippools.spiderpool.spidernet.io/v2beta1"
        );
    }
}

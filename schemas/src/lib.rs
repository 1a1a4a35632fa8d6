//! The contract between ipaudit's collector and analyzer: Avro schemas (the `.avsc` files
//! under `schemas/avro/`, every version kept), the Rust types they describe, and a
//! sans-I/O codec.
//!
//! - [`message`]: Kafka messages, Avro single-object encoding (`C3 01` + fingerprint).
//! - [`container`]: recordings, Avro object container files.
//! - [`writer_schemas`]: newer writers' schemas, learnt from the schemas topic.
//! - [`datum`]: the decoder specialised to the WatchEvent schema (every kept version), the
//!   hot path of both.
//! - [`kubernetes`]: Kubernetes objects as JSON into [`WatchEvent`]s, leniently.
//!
//! Data written with any older schema version is read as today's version.

pub mod alert;
pub mod builders;
pub mod cidr;
pub mod command;
pub mod container;
pub mod convert;
pub mod datum;
pub mod event;
pub mod kinds;
pub mod kubernetes;
pub mod message;
pub mod registry;
pub mod writer_schemas;

pub use alert::{Actor, Alert, AlertStatus, Cleanup, Evidence, Severity};
pub use command::{
    is_dns1123_subdomain, CleanupAction, CleanupCommand, CommandKey, KeyError, NameError,
    SignatureError,
};
pub use container::{ContainerError, ContainerReader, ContainerWriter};
pub use datum::{Fields, Labels, WireVersion};
pub use event::{
    CalicoAffinityInfo, CalicoAllocation, CalicoBlockInfo, CalicoHandleBlock, CalicoHandleInfo,
    CalicoPoolInfo, CiliumEndpointInfo, CiliumNodeInfo, CiliumUsedAddress, EventType, IpInfo,
    IpPoolAllocation, IpPoolInfo, IpReservationInfo, KindPart, NetworkStatus, NodeInfo, ObjectMeta,
    OwnerReference, PodAllocation, PodInfo, Remediation, RemediationOutcome, SpiderAllocation,
    SpiderEndpointAddress, SpiderEndpointInfo, SpiderIpPoolInfo, Stream, SubnetInfo, WatchEvent,
};
pub use kinds::{Ipam, KindSpec, KINDS};
pub use message::{
    decode, decode_into, decode_into_with, decode_with, encode, encode_as, fingerprint_of,
    DecodeError, EncodeError,
};
pub use registry::{DatumError, Record, SchemaSet, SchemaVersion};
pub use writer_schemas::{WriterSchemaError, WriterSchemas};

/// kube-ovn's finalizer on IPs and Subnets since v1.13.0.
pub const KUBE_OVN_FINALIZER: &str = "kubeovn.io/kube-ovn-controller";
/// kube-ovn's finalizer before v1.13.0; still found on older clusters.
pub const KUBE_OVN_LEGACY_FINALIZER: &str = "kube-ovn-controller";

/// spiderpool's finalizer on SpiderIPPools and SpiderEndpoints.
pub const SPIDERPOOL_FINALIZER: &str = "spiderpool.spidernet.io";

/// Whether a finalizer is kube-ovn's, under either name.
pub fn is_kube_ovn_finalizer(finalizer: &str) -> bool {
    finalizer == KUBE_OVN_FINALIZER || finalizer == KUBE_OVN_LEGACY_FINALIZER
}

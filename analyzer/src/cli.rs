//! Command-line settings shared by the analyzer's binary and `kubectl-ipaudit`, so that
//! both read the rules' grace periods with the same flags, defaults and environment
//! variables.

use std::time::Duration;

use clap::Args;
use ipaudit_runtime::parse::{self, millis};

use crate::analysis::rules::RuleConfig;

/// Grace periods of the rules, all on event time (the recording's or the events' clock,
/// never the analyzer's wall clock).
#[derive(Debug, Args)]
pub struct RuleArgs {
    /// How long a Subnet or pool (SpiderIPPool, IPPool) may be terminating before
    /// `subnet-stuck-terminating` fires.
    #[arg(long, default_value = "10m", value_parser = parse::duration, env = "IPAUDIT_SUBNET_GRACE")]
    pub subnet_grace: Duration,
    /// How long an allocation may outlive its pod before `ip-without-pod` fires, and a
    /// SpiderEndpoint stay terminating without its pod before `ip-stuck-terminating`.
    #[arg(long, default_value = "10m", value_parser = parse::duration, env = "IPAUDIT_OWNER_GRACE")]
    pub owner_grace: Duration,
    /// How long the two records of one allocation (whereabouts pool allocation and
    /// reservation; spiderpool pool entry and SpiderEndpoint) may disagree before
    /// `allocation-records-disagree` fires.
    #[arg(long, default_value = "5m", value_parser = parse::duration, env = "IPAUDIT_RECORDS_GRACE")]
    pub records_grace: Duration,
    /// How long a Calico allocation may outlive its pod before `ip-without-pod` fires
    /// (Calico's own leak grace period), and a node be gone while Calico blocks or a
    /// CiliumNode still hold its addresses before `block-of-missing-node`.
    #[arg(long, default_value = "15m", value_parser = parse::duration, env = "IPAUDIT_CALICO_GRACE")]
    pub calico_grace: Duration,
    /// How long a CiliumNode's used address may outlive its pod before `ip-without-pod`
    /// fires (Cilium's 10-minute IPAM expiration plus its 15 s write lag).
    #[arg(long, default_value = "11m", value_parser = parse::duration, env = "IPAUDIT_CILIUM_GRACE")]
    pub cilium_grace: Duration,
    /// How long a Calico allocation and its IPAMHandle may disagree before
    /// `ip-without-handle` or `handle-without-ip` fires (Calico writes the handle before
    /// the block on allocation and after it on release).
    #[arg(long, default_value = "60s", value_parser = parse::duration, env = "IPAUDIT_HANDLE_GRACE")]
    pub handle_grace: Duration,
}

impl RuleArgs {
    /// The rules' settings.
    pub fn config(&self) -> RuleConfig {
        RuleConfig {
            subnet_terminating_grace_ms: millis(self.subnet_grace),
            owner_grace_ms: millis(self.owner_grace),
            records_grace_ms: millis(self.records_grace),
            calico_grace_ms: millis(self.calico_grace),
            cilium_grace_ms: millis(self.cilium_grace),
            handle_grace_ms: millis(self.handle_grace),
        }
    }
}

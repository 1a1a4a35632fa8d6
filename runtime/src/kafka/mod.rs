//! How ipaudit's programs reach Kafka. Both the collector and the analyzer flatten
//! [`KafkaArgs`] into their command line, turn it into a validated [`Connection`] once at
//! start, and build every Kafka client (producers, consumers, admin) from it with one
//! policy per kind of client ([`Connection::producer`], [`Connection::group_consumer`], …), so TLS, SASL
//! and the operator's `--kafka-option`s apply to all of them alike. [`Connection::probe`]
//! tells a misconfigured connection (TLS verification, authentication) from a broker that is
//! merely down. Secrets of either program can come from files ([`crate::secret`]).

mod args;
mod clients;
mod connection;
mod probe;
pub mod topics;

pub use args::{KafkaArgs, KafkaOption, SaslMechanism, Secret, SecurityProtocol};
pub use clients::{ClientSettings, Delivery, NoOffset};
pub use connection::{Connection, ConnectionError, StartError};
pub use probe::ProbeError;
pub use topics::{TopicCreation, TopicCreationArgs, TopicSpec};

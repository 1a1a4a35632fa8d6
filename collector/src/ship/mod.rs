//! Shipping: the watchers' messages into the SQLite outbox ([`writer`], [`outbox`]), and
//! from there to Kafka ([`produce`], each writer schema published first by
//! [`publish_schemas`]); or into an Avro file instead ([`record`]). Everything here needs
//! Kafka or SQLite (the `service` feature).

pub mod outbox;
pub mod produce;
pub mod publish_schemas;
pub mod record;
pub mod writer;

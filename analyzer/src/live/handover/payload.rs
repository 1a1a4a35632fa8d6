//! What a partition's owner hands over, and how it is cut into records of the checkpoints
//! topic and put together again. Pure: no Kafka here (see [`super::topic`]).
//!
//! One handover is one JSON document ([`Handover`]): every cluster's analysis as the local
//! checkpoint holds it, the partition's next offset, its rebuild points and the
//! transitions not yet delivered by every sink. It is cut into chunks of at most
//! [`CHUNK_BYTES`], keyed `chunk/<partition>/<generation>/<index>`, and a [`Manifest`]
//! keyed `manifest/<partition>` follows them: a reader takes the latest manifest and the
//! chunks of its generation, checked by length and SHA-256, so a writer that died between
//! its chunks and its manifest leaves the previous generation readable.

use std::collections::BTreeMap;

use ipaudit_schemas::Alert;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::live::rebuild_points::PointRow;

/// The format of a handover this build writes; it reads this one and older ones.
pub const FORMAT: u32 = 1;

/// The most payload bytes one chunk carries: under Kafka's default 1 MiB record limit
/// (`max.message.bytes`) with room for the key and the batch overhead.
pub const CHUNK_BYTES: usize = 512 * 1024;

/// A partition's analysis as its owner hands it over.
#[derive(Debug, Serialize, Deserialize)]
pub struct Handover {
    /// The format it was written in ([`FORMAT`]).
    pub format: u32,
    /// The events topic's partition.
    pub partition: i32,
    /// The next offset of the events partition: every message before it is in the states.
    pub next_offset: i64,
    /// Every cluster of the partition, as the owner's checkpoint holds it.
    pub clusters: Vec<ClusterState>,
    /// The alert transitions of those clusters that some sink has not yet delivered.
    pub undelivered: Vec<Alert>,
    /// The partition's rebuild points ([`crate::live::rebuild_points`]).
    pub points: Vec<PointRow>,
}

/// One cluster's analysis.
#[derive(Debug, Serialize, Deserialize)]
pub struct ClusterState {
    /// The cluster id.
    pub cluster_id: String,
    /// Its checkpoint ([`crate::analysis::engine::Analyzer::checkpoint`], JSON).
    pub state: Box<RawValue>,
}

impl ClusterState {
    /// The state of `cluster_id` from its checkpoint bytes.
    pub fn new(cluster_id: &str, checkpoint: Vec<u8>) -> Result<ClusterState, PayloadError> {
        let text = String::from_utf8(checkpoint).map_err(|_| PayloadError::NotJson {
            cluster: cluster_id.to_owned(),
        })?;
        let state = RawValue::from_string(text).map_err(|_| PayloadError::NotJson {
            cluster: cluster_id.to_owned(),
        })?;
        Ok(ClusterState {
            cluster_id: cluster_id.to_owned(),
            state,
        })
    }
}

/// What a handover's chunks are: written after them, so that it names only chunks that
/// are in the topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The format of the handover ([`FORMAT`]).
    pub format: u32,
    /// The events topic's partition.
    pub partition: i32,
    /// Which write of the partition's handover (unique per write).
    pub generation: u64,
    /// How many chunks.
    pub chunks: u32,
    /// The offset of the first chunk in the checkpoints topic's partition.
    pub first_chunk_offset: i64,
    /// The handover's length.
    pub bytes: u64,
    /// Its SHA-256, hex.
    pub sha256: String,
    /// The events partition's next offset it carries.
    pub next_offset: i64,
    /// Who wrote it (the analyzer's instance id).
    pub writer: String,
    /// When, Unix milliseconds.
    pub written_at_ms: i64,
}

/// A record key of the checkpoints topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// The manifest of a partition's latest handover.
    Manifest {
        /// The events partition.
        partition: i32,
    },
    /// One chunk of one write.
    Chunk {
        /// The events partition.
        partition: i32,
        /// The write.
        generation: u64,
        /// Its place.
        index: u32,
    },
}

impl Key {
    /// The key as it is written.
    pub fn encode(&self) -> String {
        match self {
            Key::Manifest { partition } => format!("manifest/{partition}"),
            Key::Chunk {
                partition,
                generation,
                index,
            } => format!("chunk/{partition}/{generation}/{index}"),
        }
    }

    /// A key of this topic, or `None` for anything else.
    pub fn parse(key: &[u8]) -> Option<Key> {
        let text = std::str::from_utf8(key).ok()?;
        let mut parts = text.split('/');
        let key = match (parts.next()?, parts.next()?.parse().ok()?) {
            ("manifest", partition) => Key::Manifest { partition },
            ("chunk", partition) => Key::Chunk {
                partition,
                generation: parts.next()?.parse().ok()?,
                index: parts.next()?.parse().ok()?,
            },
            _ => return None,
        };
        parts.next().is_none().then_some(key)
    }

    /// The events partition it is about.
    pub fn partition(&self) -> i32 {
        match self {
            Key::Manifest { partition } | Key::Chunk { partition, .. } => *partition,
        }
    }
}

/// Why a handover cannot be used (its partition is then rebuilt from a snapshot).
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// A cluster's checkpoint is not the JSON a checkpoint is (a bug, not the input).
    #[error("the checkpoint of cluster {cluster} is not JSON")]
    NotJson {
        /// The cluster.
        cluster: String,
    },
    /// Chunks of the manifest's generation are missing from the topic.
    #[error("{missing} of {chunks} chunks of generation {generation} are missing")]
    MissingChunks {
        /// The write.
        generation: u64,
        /// How many it has.
        chunks: u32,
        /// How many are not found.
        missing: u32,
    },
    /// The chunks do not add up to what the manifest says (length or checksum).
    #[error("the chunks of generation {generation} do not match their manifest ({what})")]
    Mismatch {
        /// The write.
        generation: u64,
        /// What differs.
        what: &'static str,
    },
    /// Written by a newer analyzer, in a format this build does not know.
    #[error("handover format {0} is newer than this build's {FORMAT}")]
    NewerFormat(u32),
    /// The document does not parse.
    #[error("the handover does not parse")]
    Json(#[from] serde_json::Error),
}

/// A handover as the records to write: its bytes and their digest.
pub struct Encoded {
    /// The JSON document.
    pub bytes: Vec<u8>,
    /// Its SHA-256, hex.
    pub sha256: String,
}

impl Encoded {
    /// Encodes `handover`.
    pub fn of(handover: &Handover) -> Result<Encoded, PayloadError> {
        let bytes = serde_json::to_vec(handover)?;
        let sha256 = hex(&Sha256::digest(&bytes));
        Ok(Encoded { bytes, sha256 })
    }

    /// Its chunks, in order.
    pub fn chunks(&self) -> std::slice::Chunks<'_, u8> {
        self.bytes.chunks(CHUNK_BYTES)
    }

    /// How many chunks.
    pub fn chunk_count(&self) -> u32 {
        u32::try_from(self.bytes.len().div_ceil(CHUNK_BYTES)).unwrap_or(u32::MAX)
    }
}

/// The chunks of one manifest's generation, gathered as they are read.
#[derive(Debug)]
pub struct Assembly {
    manifest: Manifest,
    parts: BTreeMap<u32, Vec<u8>>,
}

impl Assembly {
    /// Gathers the chunks `manifest` names.
    pub fn new(manifest: Manifest) -> Assembly {
        Assembly {
            manifest,
            parts: BTreeMap::new(),
        }
    }

    /// Takes a record; whether it was one of the chunks.
    pub fn offer(&mut self, key: Key, value: Option<&[u8]>) -> bool {
        match (key, value) {
            (
                Key::Chunk {
                    partition,
                    generation,
                    index,
                },
                Some(value),
            ) if partition == self.manifest.partition
                && generation == self.manifest.generation
                && index < self.manifest.chunks =>
            {
                self.parts.insert(index, value.to_vec());
                true
            }
            _ => false,
        }
    }

    /// Whether every chunk is here.
    pub fn complete(&self) -> bool {
        self.parts.len() == self.manifest.chunks as usize
    }

    /// The handover, checked against its manifest.
    pub fn finish(self) -> Result<Handover, PayloadError> {
        let manifest = self.manifest;
        if manifest.format > FORMAT {
            return Err(PayloadError::NewerFormat(manifest.format));
        }
        if self.parts.len() != manifest.chunks as usize {
            return Err(PayloadError::MissingChunks {
                generation: manifest.generation,
                chunks: manifest.chunks,
                missing: manifest.chunks - self.parts.len() as u32,
            });
        }
        let bytes: Vec<u8> = self.parts.into_values().flatten().collect();
        if bytes.len() as u64 != manifest.bytes {
            return Err(PayloadError::Mismatch {
                generation: manifest.generation,
                what: "length",
            });
        }
        if hex(&Sha256::digest(&bytes)) != manifest.sha256 {
            return Err(PayloadError::Mismatch {
                generation: manifest.generation,
                what: "SHA-256",
            });
        }
        let handover: Handover = serde_json::from_slice(&bytes)?;
        if handover.format > FORMAT {
            return Err(PayloadError::NewerFormat(handover.format));
        }
        Ok(handover)
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::rebuild_points::PointKind;

    fn handover(clusters: usize, state_bytes: usize) -> Handover {
        let filler = "x".repeat(state_bytes);
        Handover {
            format: FORMAT,
            partition: 3,
            next_offset: 1234,
            clusters: (0..clusters)
                .map(|n| {
                    let state = format!(r#"{{"format":9,"filler":"{filler}","n":{n}}}"#);
                    ClusterState::new(&format!("cluster-{n}"), state.into_bytes()).unwrap()
                })
                .collect(),
            undelivered: vec![crate::analysis::alerts::sample_alert(
                "ip-1",
                "subnet-deleted-before-ip",
                ipaudit_schemas::AlertStatus::Firing,
                "77",
            )],
            points: vec![PointRow {
                kind: PointKind::Firing,
                key: "alert-1".into(),
                partition: 3,
                offset: 1200,
                version: None,
            }],
        }
    }

    fn manifest_of(encoded: &Encoded, generation: u64) -> Manifest {
        Manifest {
            format: FORMAT,
            partition: 3,
            generation,
            chunks: encoded.chunk_count(),
            first_chunk_offset: 0,
            bytes: encoded.bytes.len() as u64,
            sha256: encoded.sha256.clone(),
            next_offset: 1234,
            writer: "analyzer-0".into(),
            written_at_ms: 0,
        }
    }

    #[test]
    fn a_handover_larger_than_a_chunk_comes_back_whole_from_its_chunks_in_any_order() {
        let original = handover(3, 700_000);
        let encoded = Encoded::of(&original).unwrap();
        assert_eq!(encoded.chunk_count(), 5, "2.1 MB in chunks of 512 KiB");
        let mut assembly = Assembly::new(manifest_of(&encoded, 7));
        let chunks: Vec<&[u8]> = encoded.chunks().collect();
        for (index, chunk) in chunks.iter().enumerate().rev() {
            assert!(!assembly.complete());
            let key = Key::Chunk {
                partition: 3,
                generation: 7,
                index: index as u32,
            };
            assert!(assembly.offer(key, Some(chunk)));
        }
        assert!(assembly.complete());
        let back = assembly.finish().unwrap();
        assert_eq!(back.next_offset, 1234);
        assert_eq!(back.clusters.len(), 3);
        assert_eq!(back.clusters[2].cluster_id, "cluster-2");
        assert_eq!(
            back.clusters[2].state.get(),
            original.clusters[2].state.get()
        );
        assert_eq!(back.undelivered, original.undelivered);
        assert_eq!(back.points, original.points);
    }

    #[test]
    fn chunks_of_another_generation_or_partition_and_tombstones_are_not_taken() {
        let encoded = Encoded::of(&handover(1, 10)).unwrap();
        let mut assembly = Assembly::new(manifest_of(&encoded, 7));
        let chunk = |partition, generation| Key::Chunk {
            partition,
            generation,
            index: 0,
        };
        assert!(!assembly.offer(chunk(3, 6), Some(&encoded.bytes)));
        assert!(!assembly.offer(chunk(4, 7), Some(&encoded.bytes)));
        assert!(!assembly.offer(chunk(3, 7), None), "a tombstone");
        assert!(!assembly.offer(Key::Manifest { partition: 3 }, Some(b"{}")));
        assert!(matches!(
            assembly.finish(),
            Err(PayloadError::MissingChunks { missing: 1, .. })
        ));
    }

    #[test]
    fn chunks_that_do_not_match_their_manifest_are_refused() {
        let encoded = Encoded::of(&handover(1, 10)).unwrap();
        let mut other = encoded.bytes.clone();
        let last = other.len() - 2;
        other[last] = b'9';
        let key = Key::Chunk {
            partition: 3,
            generation: 7,
            index: 0,
        };
        let mut assembly = Assembly::new(manifest_of(&encoded, 7));
        assembly.offer(key, Some(&other));
        assert!(matches!(
            assembly.finish(),
            Err(PayloadError::Mismatch {
                what: "SHA-256",
                ..
            })
        ));
        let mut newer = manifest_of(&encoded, 7);
        newer.format = FORMAT + 1;
        let mut assembly = Assembly::new(newer);
        assembly.offer(key, Some(&encoded.bytes));
        assert!(matches!(
            assembly.finish(),
            Err(PayloadError::NewerFormat(_))
        ));
    }

    #[test]
    fn keys_read_back_as_written_and_other_keys_are_not_ours() {
        for key in [
            Key::Manifest { partition: 11 },
            Key::Chunk {
                partition: 0,
                generation: 1_733_300_000_123,
                index: 4,
            },
        ] {
            assert_eq!(Key::parse(key.encode().as_bytes()), Some(key));
        }
        for other in [
            "",
            "manifest",
            "manifest/x",
            "chunk/1/2",
            "chunk/1/2/3/4",
            "other/1",
        ] {
            assert_eq!(Key::parse(other.as_bytes()), None, "{other}");
        }
    }
}

//! The fast path of the kubectl reader: a watch document of a Pod, a kube-ovn IP or Subnet
//! deserialised straight into its event, typed and borrowing from the document, reading
//! only the fields the analysis keeps (everything else is skipped without building a
//! value).
//!
//! It vouches only for documents it reads whole and exactly as the generic conversion
//! (`ipaudit_schemas::convert::from_watch_document`) would: any field of an unexpected
//! type, a duplicated field, a time that does not parse, makes it give up (`None`), and
//! the caller takes the generic path, which keeps the event without the bad field and
//! says which field it was. A property test holds the two paths to the same events.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use ipaudit_schemas::kinds::{self, CALICO_CONTAINER_ID_ANNOTATION, NETWORK_STATUS_ANNOTATION};
use ipaudit_schemas::kubernetes::parse_timestamp_ms;
use ipaudit_schemas::{
    EventType, IpInfo, KindPart, NetworkStatus, ObjectMeta, OwnerReference, PodAllocation, PodInfo,
    Stream, SubnetInfo, WatchEvent,
};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;

/// Whether the fast path reads documents of this stream.
pub(crate) fn reads(stream: Stream) -> bool {
    matches!(stream, Stream::Pod | Stream::Ip | Stream::Subnet)
}

/// The event of one complete document of `stream`, when the fast path can vouch for it.
pub(crate) fn convert(stream: Stream, doc: &[u8]) -> Option<WatchEvent> {
    match stream {
        Stream::Pod => read::<PodSpec, PodStatus>(stream, doc, pod_part),
        Stream::Ip => read::<IpSpec, Skipped>(stream, doc, ip_part),
        Stream::Subnet => read::<SubnetSpec, SubnetStatus>(stream, doc, subnet_part),
        _ => None,
    }
}

/// A string, borrowed from the document unless it had escapes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Text<'a>(Cow<'a, str>);

impl Text<'_> {
    fn owned(&self) -> String {
        self.0.clone().into_owned()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// A JSON object read as `T`. serde's derived structs also accept an array (fields by
/// position); the generic conversion calls that a field of the wrong type, so this does
/// not.
struct Obj<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjVisitor<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        deserializer.deserialize_map(ObjVisitor(PhantomData))
    }
}

/// An object whose content is not read (but must be an object, or null).
#[derive(Default)]
struct Skipped;

impl<'de> Deserialize<'de> for Skipped {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Obj::<IgnoredAny>::deserialize(deserializer).map(|_| Skipped)
    }
}

/// Any JSON value, of which only a string or a bool is kept: where the generic conversion
/// reads a field with `as_str`/`as_bool`, a value of another type is silently nothing.
enum Loose<'a> {
    Str(Cow<'a, str>),
    Bool(bool),
    Other,
}

impl Loose<'_> {
    fn str(&self) -> Option<&str> {
        match self {
            Loose::Str(s) => Some(s),
            _ => None,
        }
    }

    fn bool(&self) -> Option<bool> {
        match self {
            Loose::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

/// Reads any value into `Loose`, or through `on_seq`/`on_map` for arrays and objects.
struct LooseVisitor<'a, V>(PhantomData<&'a V>);

impl<'de: 'a, 'a> Deserialize<'de> for Loose<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LooseVisitor::<Loose<'a>>(PhantomData))
    }
}

impl<'de: 'a, 'a> Visitor<'de> for LooseVisitor<'a, Loose<'a>> {
    type Value = Loose<'a>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Loose::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Loose::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Loose::Str(Cow::Owned(v)))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Loose::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq).map(|()| Loose::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map).map(|()| Loose::Other)
    }
}

fn drain_seq<'de, A: de::SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// `Some(T)` for a JSON object, `None` (silently) for any other value: an array entry the
/// generic conversion reads with `get`, which is nothing on a non-object.
struct Entry<T>(Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Entry<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for EntryVisitor<T> {
            type Value = Entry<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(|t| Entry(Some(t)))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                drain_seq(seq).map(|()| Entry(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Entry(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Entry(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Entry(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Entry(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Entry(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Entry(None))
            }
        }
        deserializer.deserialize_any(EntryVisitor(PhantomData))
    }
}

/// The items of an array, or nothing (silently) for any other value.
struct LooseSeq<T>(Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for LooseSeq<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SeqVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for SeqVisitor<T> {
            type Value = LooseSeq<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(LooseSeq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                drain_map(map).map(|()| LooseSeq(Vec::new()))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(LooseSeq(Vec::new()))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(LooseSeq(Vec::new()))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(LooseSeq(Vec::new()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(LooseSeq(Vec::new()))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(LooseSeq(Vec::new()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(LooseSeq(Vec::new()))
            }
        }
        deserializer.deserialize_any(SeqVisitor(PhantomData))
    }
}

/// An object of strings, as (key, value) pairs in document order.
/// Values are `Loose`: the generic conversion ignores a non-string value of an annotation
/// it does not keep.
struct Pairs<'a>(Vec<(Text<'a>, Loose<'a>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Pairs<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PairsVisitor<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for PairsVisitor<'a> {
            type Value = Pairs<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(pair) = map.next_entry::<Text<'a>, Loose<'a>>()? {
                    pairs.push(pair);
                }
                Ok(Pairs(pairs))
            }
        }
        deserializer.deserialize_map(PairsVisitor(PhantomData))
    }
}

/// A Subnet count: decimal text of a number, or a string as it was.
struct Count(String);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;
        impl Visitor<'_> for CountVisitor {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number or a string")
            }
            // Written as serde_json's `Number` writes them, so that both paths agree.
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                Ok(Count(serde_json::Number::from(v).to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                Ok(Count(serde_json::Number::from(v).to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Count, E> {
                serde_json::Number::from_f64(v)
                    .map(|n| Count(n.to_string()))
                    .ok_or_else(|| E::custom("not a finite number"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Count, E> {
                Ok(Count(v.to_owned()))
            }
        }
        deserializer.deserialize_any(CountVisitor)
    }
}

#[derive(Deserialize)]
struct ManagedEntry<'a> {
    #[serde(borrow, default)]
    time: Option<Loose<'a>>,
}

#[derive(Deserialize)]
struct Condition<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Loose<'a>>,
    #[serde(borrow, default)]
    status: Option<Loose<'a>>,
}

#[derive(Deserialize)]
struct Document<'a, S, T> {
    #[serde(rename = "type", borrow)]
    event_type: Text<'a>,
    #[serde(borrow)]
    object: Obj<Object<'a, S, T>>,
}

/// The metadata, spec and status are boxed: serde's visitors hand a field's value up
/// through a `Result` and an `Option` at each level, and moving a 280-byte `Meta` and a
/// 264-byte `IpSpec` that way cost more than the allocation (the reader alone 0.87, then
/// 0.94, paired runs on the 1M-event recording).
#[derive(Deserialize)]
struct Object<'a, S, T> {
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Option<Loose<'a>>,
    #[serde(borrow, default)]
    kind: Option<Loose<'a>>,
    #[serde(borrow, default)]
    metadata: Option<Obj<Box<Meta<'a>>>>,
    // Missing, these are `None` without `default` (which would ask `S: Default`).
    spec: Option<Obj<Box<S>>>,
    status: Option<Obj<Box<T>>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta<'a> {
    #[serde(borrow, default)]
    resource_version: Option<Text<'a>>,
    #[serde(borrow, default)]
    uid: Option<Text<'a>>,
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(borrow, default)]
    namespace: Option<Text<'a>>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(borrow, default)]
    creation_timestamp: Option<Text<'a>>,
    #[serde(borrow, default)]
    deletion_timestamp: Option<Text<'a>>,
    #[serde(default)]
    deletion_grace_period_seconds: Option<i64>,
    #[serde(borrow, default)]
    finalizers: Option<Vec<Text<'a>>>,
    #[serde(borrow, default)]
    owner_references: Option<Vec<Obj<OwnerRef<'a>>>>,
    #[serde(borrow, default)]
    labels: Option<Pairs<'a>>,
    #[serde(borrow, default)]
    annotations: Option<Pairs<'a>>,
    #[serde(borrow, default)]
    managed_fields: Option<LooseSeq<Entry<ManagedEntry<'a>>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OwnerRef<'a> {
    #[serde(borrow, default)]
    api_version: Option<Text<'a>>,
    #[serde(borrow, default)]
    kind: Option<Text<'a>>,
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(borrow, default)]
    uid: Option<Text<'a>>,
    #[serde(borrow, default)]
    controller: Option<Loose<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct IpSpec<'a> {
    #[serde(borrow, default)]
    subnet: Option<Text<'a>>,
    #[serde(borrow, default)]
    attach_subnets: Option<Vec<Text<'a>>>,
    #[serde(borrow, default)]
    pod_name: Option<Text<'a>>,
    #[serde(borrow, default)]
    namespace: Option<Text<'a>>,
    #[serde(borrow, default)]
    node_name: Option<Text<'a>>,
    #[serde(borrow, default)]
    ip_address: Option<Text<'a>>,
    #[serde(borrow, default)]
    v4_ip_address: Option<Text<'a>>,
    #[serde(borrow, default)]
    v6_ip_address: Option<Text<'a>>,
    #[serde(borrow, default)]
    attach_ips: Option<Vec<Text<'a>>>,
    #[serde(borrow, default)]
    mac_address: Option<Text<'a>>,
    #[serde(borrow, default)]
    pod_type: Option<Text<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct SubnetSpec<'a> {
    #[serde(borrow, default)]
    cidr_block: Option<Text<'a>>,
    #[serde(borrow, default)]
    vpc: Option<Text<'a>>,
    #[serde(borrow, default)]
    provider: Option<Text<'a>>,
    #[serde(borrow, default)]
    protocol: Option<Text<'a>>,
    #[serde(borrow, default)]
    gateway: Option<Text<'a>>,
}

#[derive(Deserialize, Default)]
struct SubnetStatus {
    #[serde(rename = "v4usingIPs", default)]
    v4_using: Option<Count>,
    #[serde(rename = "v4availableIPs", default)]
    v4_available: Option<Count>,
    #[serde(rename = "v6usingIPs", default)]
    v6_using: Option<Count>,
    #[serde(rename = "v6availableIPs", default)]
    v6_available: Option<Count>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PodSpec<'a> {
    #[serde(borrow, default)]
    node_name: Option<Text<'a>>,
    #[serde(borrow, default)]
    host_network: Option<Loose<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PodStatus<'a> {
    #[serde(borrow, default)]
    phase: Option<Text<'a>>,
    #[serde(rename = "podIPs", borrow, default)]
    pod_ips: Option<Vec<Entry<PodIp<'a>>>>,
    #[serde(borrow, default)]
    conditions: Option<LooseSeq<Entry<Condition<'a>>>>,
}

#[derive(Deserialize)]
struct PodIp<'a> {
    #[serde(borrow, default)]
    ip: Option<Loose<'a>>,
}

#[derive(Deserialize)]
struct NetworkEntry<'a> {
    #[serde(borrow, default)]
    name: Option<Loose<'a>>,
    #[serde(borrow, default)]
    interface: Option<Loose<'a>>,
    #[serde(borrow, default)]
    ips: Option<LooseSeq<Loose<'a>>>,
    #[serde(borrow, default)]
    mac: Option<Loose<'a>>,
    #[serde(borrow, default)]
    default: Option<Loose<'a>>,
}

fn text(field: &Option<Text<'_>>) -> String {
    field.as_ref().map(Text::owned).unwrap_or_default()
}

fn loose(field: &Option<Loose<'_>>) -> String {
    field
        .as_ref()
        .and_then(Loose::str)
        .unwrap_or_default()
        .to_owned()
}

fn texts(field: &Option<Vec<Text<'_>>>) -> Vec<String> {
    field
        .as_ref()
        .map(|items| items.iter().map(Text::owned).collect())
        .unwrap_or_default()
}

/// A time, or `Err` when it is there but does not parse (the generic path says so).
fn time(field: &Option<Text<'_>>) -> Result<Option<i64>, ()> {
    match field {
        None => Ok(None),
        Some(t) => parse_timestamp_ms(&t.0).map(Some).ok_or(()),
    }
}

/// What the generic path keeps of annotations: those of kube-ovn and multus.
/// (The same test as `ipaudit_schemas::kubernetes`'s; the property test holds them equal.)
fn is_network_annotation(key: &str) -> bool {
    if key.starts_with("k8s.v1.cni.cncf.io/") {
        return true;
    }
    match key.split_once(".kubernetes.io/") {
        Some((prefix, _)) => {
            prefix != "kubectl" && prefix != "deployment" && prefix != "control-plane"
        }
        None => false,
    }
}

type PartOf<S, T> = fn(Option<S>, Option<T>, &Option<Pairs<'_>>) -> Option<KindPart>;

fn read<'a, S, T>(stream: Stream, doc: &'a [u8], part: PartOf<S, T>) -> Option<WatchEvent>
where
    S: Deserialize<'a>,
    T: Deserialize<'a>,
{
    // Checked as UTF-8 once, whole, the document's strings are not checked again one by
    // one. A document that is not UTF-8 throughout is not valid JSON, even where its bad
    // bytes lie in a skipped value: the generic conversion says so.
    let whole = std::str::from_utf8(doc).ok()?;
    let document: Document<'a, S, T> = serde_json::from_str(whole).ok()?;
    let event_type = match &*document.event_type.0 {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        "BOOKMARK" => EventType::Bookmark,
        _ => return None,
    };
    let Obj(object) = document.object;
    let api_version = object
        .api_version
        .as_ref()
        .and_then(Loose::str)
        .unwrap_or("");
    let kind = object.kind.as_ref().and_then(Loose::str).unwrap_or("");
    if kinds::of_object(api_version, kind)?.stream != stream {
        return None;
    }
    let meta = object.metadata.map(|Obj(m)| *m).unwrap_or_default();
    let mut event = WatchEvent::new(
        stream,
        event_type,
        meta.resource_version.as_ref().map_or("", |t| &t.0),
    );
    if event_type == EventType::Bookmark {
        return Some(event);
    }
    // A kept annotation or a label that is not a string is a problem the generic path
    // names.
    let mut annotations = BTreeMap::new();
    for (k, v) in meta.annotations.iter().flat_map(|pairs| pairs.0.iter()) {
        if is_network_annotation(&k.0) {
            annotations.insert(k.owned(), v.str()?.to_owned());
        }
    }
    let mut labels = BTreeMap::new();
    for (k, v) in meta.labels.iter().flat_map(|pairs| pairs.0.iter()) {
        labels.insert(k.owned(), v.str()?.to_owned());
    }
    let owner_references = meta
        .owner_references
        .as_ref()
        .map(|refs| {
            refs.iter()
                .map(|Obj(r)| OwnerReference {
                    api_version: text(&r.api_version),
                    kind: text(&r.kind),
                    name: text(&r.name),
                    uid: text(&r.uid),
                    controller: r.controller.as_ref().and_then(Loose::bool),
                })
                .collect()
        })
        .unwrap_or_default();
    event.metadata = Some(ObjectMeta {
        uid: text(&meta.uid),
        name: text(&meta.name),
        namespace: meta
            .namespace
            .as_ref()
            .filter(|ns| !ns.0.is_empty())
            .map(Text::owned),
        generation: meta.generation,
        creation_timestamp_ms: time(&meta.creation_timestamp).ok()?,
        deletion_timestamp_ms: time(&meta.deletion_timestamp).ok()?,
        deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
        finalizers: texts(&meta.finalizers),
        owner_references,
        labels,
        annotations,
        last_update_ms: meta
            .managed_fields
            .iter()
            .flat_map(|m| m.0.iter())
            .filter_map(|Entry(e)| e.as_ref()?.time.as_ref()?.str())
            .filter_map(parse_timestamp_ms)
            .max(),
    });
    event.part = Some(part(
        object.spec.map(|Obj(s)| *s),
        object.status.map(|Obj(s)| *s),
        &meta.annotations,
    )?);
    Some(event)
}

fn ip_part(
    spec: Option<IpSpec<'_>>,
    _: Option<Skipped>,
    _: &Option<Pairs<'_>>,
) -> Option<KindPart> {
    let spec = spec.unwrap_or_default();
    Some(KindPart::Ip(Box::new(IpInfo {
        subnet: text(&spec.subnet),
        attach_subnets: texts(&spec.attach_subnets),
        pod_name: text(&spec.pod_name),
        pod_namespace: text(&spec.namespace),
        node_name: text(&spec.node_name),
        ip_address: text(&spec.ip_address),
        v4_ip_address: text(&spec.v4_ip_address),
        v6_ip_address: text(&spec.v6_ip_address),
        attach_ips: texts(&spec.attach_ips),
        mac_address: text(&spec.mac_address),
        pod_type: text(&spec.pod_type),
    })))
}

fn subnet_part(
    spec: Option<SubnetSpec<'_>>,
    status: Option<SubnetStatus>,
    _: &Option<Pairs<'_>>,
) -> Option<KindPart> {
    let spec = spec.unwrap_or_default();
    let status = status.unwrap_or_default();
    Some(KindPart::Subnet(Box::new(SubnetInfo {
        cidr_block: text(&spec.cidr_block),
        vpc: text(&spec.vpc),
        provider: text(&spec.provider),
        protocol: text(&spec.protocol),
        gateway: text(&spec.gateway),
        v4_using_ips: status.v4_using.map(|c| c.0),
        v4_available_ips: status.v4_available.map(|c| c.0),
        v6_using_ips: status.v6_using.map(|c| c.0),
        v6_available_ips: status.v6_available.map(|c| c.0),
    })))
}

fn pod_part(
    spec: Option<PodSpec<'_>>,
    status: Option<PodStatus<'_>>,
    annotations: &Option<Pairs<'_>>,
) -> Option<KindPart> {
    let spec = spec.unwrap_or_default();
    let status = status.unwrap_or_default();
    let mut by_provider: BTreeMap<&str, PodAllocation> = BTreeMap::new();
    let mut network_status = Vec::new();
    let mut calico_container_id = String::new();
    for (key, value) in annotations.iter().flat_map(|pairs| pairs.0.iter()) {
        if key.0 == CALICO_CONTAINER_ID_ANNOTATION {
            // Anything but a string (even null) is left to the generic path.
            calico_container_id = value.str()?.to_owned();
            continue;
        }
        if key.0 == NETWORK_STATUS_ANNOTATION {
            // A JSON list in the string; anything but a list of objects of the expected
            // types is left to the generic path, which says what was wrong.
            let Some(value) = value.str() else { continue };
            let entries: Vec<Entry<NetworkEntry<'_>>> = serde_json::from_str(value).ok()?;
            network_status = entries
                .iter()
                .filter_map(|Entry(e)| e.as_ref())
                .map(|e| NetworkStatus {
                    name: loose(&e.name),
                    interface: loose(&e.interface),
                    ips: e
                        .ips
                        .iter()
                        .flat_map(|ips| ips.0.iter())
                        .filter_map(Loose::str)
                        .map(|ip| ip.split('/').next().unwrap_or(ip).to_owned())
                        .collect(),
                    mac: loose(&e.mac),
                    default: e.default.as_ref().and_then(Loose::bool).unwrap_or(false),
                })
                .collect();
            continue;
        }
        let Some((provider, field)) = key.0.split_once(".kubernetes.io/") else {
            continue;
        };
        if !matches!(
            field,
            "allocated" | "ip_address" | "mac_address" | "logical_switch" | "cidr"
        ) {
            continue;
        }
        let entry = by_provider
            .entry(provider)
            .or_insert_with(|| PodAllocation {
                provider: provider.to_owned(),
                ..PodAllocation::default()
            });
        let Some(value) = value.str() else { continue };
        match field {
            "allocated" => entry.allocated = value == "true",
            "ip_address" => entry.ip_address = value.to_string(),
            "mac_address" => entry.mac_address = value.to_string(),
            "logical_switch" => entry.logical_switch = value.to_string(),
            _ => entry.cidr = value.to_string(),
        }
    }
    Some(KindPart::Pod(Box::new(PodInfo {
        phase: text(&status.phase),
        node_name: text(&spec.node_name),
        pod_ips: status
            .pod_ips
            .iter()
            .flatten()
            .filter_map(|Entry(ip)| Some(ip.as_ref()?.ip.as_ref()?.str()?.to_owned()))
            .collect(),
        allocations: by_provider.into_values().collect(),
        network_status,
        disruption_target: status
            .conditions
            .iter()
            .flat_map(|c| c.0.iter())
            .any(|Entry(c)| {
                c.as_ref().is_some_and(|c| {
                    c.kind.as_ref().and_then(Loose::str) == Some("DisruptionTarget")
                        && c.status.as_ref().and_then(Loose::str) == Some("True")
                })
            }),
        host_network: spec.host_network.as_ref().and_then(Loose::bool) == Some(true),
        calico_container_id,
    })))
}

#[cfg(test)]
mod tests {
    use ipaudit_schemas::convert::from_watch_document;
    use proptest::prelude::*;
    use serde_json::{json, Map, Value};

    use super::*;

    /// The generic path's event, when it reads the document without any problem.
    fn generic(doc: &[u8]) -> Option<WatchEvent> {
        let value: Value = serde_json::from_slice(doc).ok()?;
        let converted = from_watch_document(&value).ok()?;
        converted.problems.is_empty().then_some(converted.event)
    }

    /// A JSON value of any type (mostly the wrong one, where it is used).
    fn any_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e40f64..1e40).prop_map(Value::from),
            Just(json!(340282366920938463463374607431768211456.0)),
            text().prop_map(Value::from),
            Just(json!([])),
            Just(json!(["a", 1])),
            Just(json!({})),
            Just(json!({"x": [1, {"y": null}]})),
        ]
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9.-]{0,12}",
            Just("quo\"te\\slash\u{e9}\n".to_owned()),
            Just("2025-06-15T15:23:16Z".to_owned()),
            Just("2025-06-15T15:23:16.611+02:00".to_owned()),
            Just("ovn".to_owned()),
            Just("True".to_owned()),
            Just("DisruptionTarget".to_owned()),
            Just("10.0.0.7/24".to_owned()),
        ]
    }

    /// A field of the expected type most of the time, absent or of another type else.
    fn field(good: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Option<Value>> {
        prop_oneof![
            6 => good.prop_map(Some),
            1 => Just(None),
            1 => any_value().prop_map(Some),
        ]
        .boxed()
    }

    fn string() -> impl Strategy<Value = Value> {
        text().prop_map(Value::from)
    }

    fn strings() -> impl Strategy<Value = Value> {
        prop::collection::vec(text(), 0..3).prop_map(|v| json!(v))
    }

    fn object(fields: Vec<(&'static str, Option<Value>)>) -> Value {
        Value::Object(
            fields
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
                .collect::<Map<_, _>>(),
        )
    }

    fn string_map() -> impl Strategy<Value = Value> {
        prop::collection::btree_map(
            prop_oneof![
                text(),
                Just("ovn.kubernetes.io/ip_address".to_owned()),
                Just("ovn.kubernetes.io/allocated".to_owned()),
                Just("net1.ns.kubernetes.io/cidr".to_owned()),
                Just("kubectl.kubernetes.io/last-applied-configuration".to_owned()),
                Just("k8s.v1.cni.cncf.io/network-status".to_owned()),
            ],
            prop_oneof![
                8 => string(),
                1 => Just(Value::from(r#"[{"name":"kube-ovn","interface":"eth0","ips":["10.0.0.7/24"],"mac":"aa","default":true}]"#)),
                1 => Just(Value::from(r#"[{"name":1}]"#)),
            ],
            0..4,
        )
        .prop_map(|m| json!(m))
    }

    fn metadata() -> impl Strategy<Value = Value> {
        let owner = (
            field(string()),
            field(string()),
            field(any::<bool>().prop_map(Value::from)),
        )
            .prop_map(|(kind, uid, controller)| {
                object(vec![
                    ("apiVersion", Some(json!("apps/v1"))),
                    ("kind", kind),
                    ("name", Some(json!("rs"))),
                    ("uid", uid),
                    ("controller", controller),
                ])
            });
        let managed = prop::collection::vec(
            field(string())
                .prop_map(|time| object(vec![("manager", Some(json!("m"))), ("time", time)])),
            0..3,
        )
        .prop_map(Value::from);
        (
            (
                field(string()),
                field(string()),
                field(string()),
                field(string()),
            ),
            (
                field(any::<i64>().prop_map(Value::from)),
                field(string()),
                field(string()),
            ),
            (
                field(strings()),
                field(prop::collection::vec(owner, 0..2).prop_map(Value::from)),
            ),
            (field(string_map()), field(string_map()), field(managed)),
        )
            .prop_map(
                |(
                    (rv, uid, name, ns),
                    (generation, created, deleted),
                    (finalizers, owners),
                    (labels, annotations, managed),
                )| {
                    object(vec![
                        ("resourceVersion", rv),
                        ("uid", uid),
                        ("name", name),
                        ("namespace", ns),
                        ("generation", generation),
                        ("creationTimestamp", created),
                        ("deletionTimestamp", deleted),
                        ("finalizers", finalizers),
                        ("ownerReferences", owners),
                        ("labels", labels),
                        ("annotations", annotations),
                        ("managedFields", managed),
                    ])
                },
            )
    }

    fn count() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            Just(json!(340282366920938463463374607431768211456.0)),
            (0f64..1e30).prop_map(Value::from),
            "[0-9]{1,40}".prop_map(Value::from),
        ]
    }

    /// (apiVersion, kind, spec, status) of one of the fast path's kinds.
    fn kind_parts(
    ) -> impl Strategy<Value = (&'static str, &'static str, Option<Value>, Option<Value>)> {
        let ip = (
            (
                field(string()),
                field(strings()),
                field(string()),
                field(string()),
            ),
            (
                field(string()),
                field(string()),
                field(string()),
                field(string()),
            ),
            (field(strings()), field(string()), field(string())),
        )
            .prop_map(
                |((subnet, attach, pod, ns), (node, ip, v4, v6), (attach_ips, mac, pod_type))| {
                    let spec = object(vec![
                        ("subnet", subnet),
                        ("attachSubnets", attach),
                        ("podName", pod),
                        ("namespace", ns),
                        ("nodeName", node),
                        ("ipAddress", ip),
                        ("v4IpAddress", v4),
                        ("v6IpAddress", v6),
                        ("attachIps", attach_ips),
                        ("macAddress", mac),
                        ("podType", pod_type),
                        ("unread", Some(json!({"deep": [1, 2, {"x": "y"}]}))),
                    ]);
                    ("kubeovn.io/v1", "IP", Some(spec), None)
                },
            );
        let subnet = (
            (
                field(string()),
                field(string()),
                field(string()),
                field(string()),
                field(string()),
            ),
            (
                field(count()),
                field(count()),
                field(count()),
                field(count()),
            ),
        )
            .prop_map(|((cidr, vpc, provider, protocol, gateway), (a, b, c, d))| {
                let spec = object(vec![
                    ("cidrBlock", cidr),
                    ("vpc", vpc),
                    ("provider", provider),
                    ("protocol", protocol),
                    ("gateway", gateway),
                ]);
                let status = object(vec![
                    ("v4usingIPs", a),
                    ("v4availableIPs", b),
                    ("v6usingIPs", c),
                    ("v6availableIPs", d),
                    (
                        "conditions",
                        Some(json!([{"type": "Ready", "status": "True"}])),
                    ),
                ]);
                ("kubeovn.io/v1", "Subnet", Some(spec), Some(status))
            });
        let condition = (field(string()), field(string())).prop_map(|(t, s)| {
            object(vec![
                ("type", t),
                ("status", s),
                ("reason", Some(json!("x"))),
            ])
        });
        let pod_ip = field(string()).prop_map(|ip| object(vec![("ip", ip)]));
        let pod = (
            field(string()),
            field(string()),
            field(prop::collection::vec(pod_ip, 0..3).prop_map(Value::from)),
            field(prop::collection::vec(condition, 0..3).prop_map(Value::from)),
        )
            .prop_map(|(node, phase, ips, conditions)| {
                let spec = object(vec![
                    ("nodeName", node),
                    ("containers", Some(json!([{"name": "c", "image": "i"}]))),
                ]);
                let status = object(vec![
                    ("phase", phase),
                    ("podIPs", ips),
                    ("conditions", conditions),
                ]);
                ("v1", "Pod", Some(spec), Some(status))
            });
        prop_oneof![ip, subnet, pod]
    }

    fn document() -> impl Strategy<Value = (Stream, &'static str, Vec<u8>)> {
        (
            prop_oneof![8 => Just("ADDED"), 4 => Just("MODIFIED"), 2 => Just("DELETED"), 1 => Just("BOOKMARK"), 1 => Just("ERROR")],
            kind_parts(),
            field(metadata()),
            field(Just(Value::Null)),
            any::<bool>(),
        )
            .prop_map(|(event_type, (api, kind, spec, status), meta, _, pretty)| {
                let spec = spec.map(Some).unwrap_or(None);
                let object = object(vec![
                    ("apiVersion", Some(json!(api))),
                    ("kind", Some(json!(kind))),
                    ("metadata", meta),
                    ("spec", spec),
                    ("status", status),
                ]);
                let stream = kinds::of_object(api, kind).map(|k| k.stream).unwrap_or(Stream::Unknown);
                let doc = json!({"type": event_type, "object": object});
                let text = if pretty {
                    serde_json::to_vec_pretty(&doc).unwrap()
                } else {
                    serde_json::to_vec(&doc).unwrap()
                };
                (stream, event_type, text)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Where the fast path reads a document, it reads the same event as the generic
        /// conversion; and where the generic one finds nothing wrong, the fast path reads it
        /// (but for bookmarks, which kubectl does not print: the generic path reads only
        /// their version, whatever the rest holds).
        #[test]
        fn the_fast_path_reads_what_the_generic_conversion_reads((stream, event_type, doc) in document()) {
            let fast = convert(stream, &doc);
            let slow = generic(&doc);
            if let Some(fast) = &fast {
                prop_assert_eq!(Some(fast), slow.as_ref(), "{}", String::from_utf8_lossy(&doc));
            }
            if slow.is_some() && event_type != "BOOKMARK" {
                prop_assert!(fast.is_some(), "fast path gave up on {}", String::from_utf8_lossy(&doc));
            }
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_in_a_skipped_field_leave_the_document_to_the_generic_path() {
        let mut doc = br#"{"type":"ADDED","object":{"apiVersion":"kubeovn.io/v1","kind":"IP","metadata":{"name":"a","resourceVersion":"5"},"spec":{"subnet":"s"},"status":{"note":"XX"}}}"#.to_vec();
        let at = doc.windows(2).position(|w| w == b"XX").unwrap();
        doc[at] = 0xff;
        assert!(convert(Stream::Ip, &doc).is_none());
        // Which finds it is not JSON at all.
        assert!(serde_json::from_slice::<serde_json::Value>(&doc).is_err());
        doc[at] = b'X';
        assert!(convert(Stream::Ip, &doc).is_some());
    }

    #[test]
    fn a_duplicated_field_is_left_to_the_generic_path() {
        let doc = br#"{"type":"ADDED","object":{"apiVersion":"kubeovn.io/v1","kind":"IP","metadata":{"name":"a","name":"b","resourceVersion":"5"},"spec":{"subnet":"s"}}}"#;
        assert!(convert(Stream::Ip, doc).is_none());
    }

    #[test]
    fn a_struct_written_as_an_array_is_left_to_the_generic_path() {
        let doc = br#"{"type":"ADDED","object":{"apiVersion":"kubeovn.io/v1","kind":"IP","metadata":["a","b"],"spec":{"subnet":"s"}}}"#;
        assert!(convert(Stream::Ip, doc).is_none());
        let value: Value = serde_json::from_slice(doc).unwrap();
        assert!(!from_watch_document(&value).unwrap().problems.is_empty());
    }

    #[test]
    fn another_kind_than_the_stream_is_not_read() {
        let doc = br#"{"type":"ADDED","object":{"apiVersion":"kubeovn.io/v1","kind":"Subnet","metadata":{"name":"a","resourceVersion":"5"}}}"#;
        assert!(convert(Stream::Ip, doc).is_none());
        assert!(convert(Stream::Subnet, doc).is_some());
    }
}

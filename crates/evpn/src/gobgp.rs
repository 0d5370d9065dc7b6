//! gobgpd's gRPC API (`apipb.GobgpApi`, gobgp 3.x), the subset qbridge-evpn calls: `GetBgp`
//! (the local AS), `AddPath`, `DeletePath` and `ListPath` on the global RIB, family L2VPN
//! EVPN, and `WatchEvent`, whose best-path changes the adapter applies to its mirror of the
//! RIB ([`crate::typed`] decodes them). The messages are written here with prost's derives, their field numbers those of
//! gobgp's `api/gobgp.proto` (v3.10); fields qbridge does not use are left out (protobuf
//! skips them). Routes travel as BGP wire bytes (`Path.nlri_binary`, `Path.pattrs_binary`,
//! which gobgpd accepts and, with `enable_only_binary`, returns), encoded by
//! [`crate::route`]; only `WatchEvent`'s paths come typed (`Any` messages, no bytes).
//!
//! The client is blocking: each call runs on a current-thread tokio runtime owned by
//! [`Gobgp`], with a deadline, so the adapter's loop stays a plain loop.

use std::time::Duration;
use tonic::codegen::http::uri::PathAndQuery;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Family {
    #[prost(int32, tag = "1")]
    pub afi: i32,
    #[prost(int32, tag = "2")]
    pub safi: i32,
}

/// `google.protobuf.Any`: a typed message and its type (`type.googleapis.com/apipb.NAME`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Any {
    #[prost(string, tag = "1")]
    pub type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Path {
    /// The NLRI as a typed message (`WatchEvent`'s paths: gobgpd 3.10 sends no binary there;
    /// decoded by [`crate::typed`]).
    #[prost(message, optional, tag = "1")]
    pub nlri: Option<Any>,
    /// The attributes as typed messages (likewise).
    #[prost(message, repeated, tag = "2")]
    pub pattrs: Vec<Any>,
    #[prost(bool, tag = "4")]
    pub best: bool,
    #[prost(bool, tag = "5")]
    pub is_withdraw: bool,
    #[prost(message, optional, tag = "9")]
    pub family: Option<Family>,
    #[prost(uint32, tag = "10")]
    pub source_asn: u32,
    #[prost(string, tag = "11")]
    pub source_id: String,
    #[prost(bool, tag = "14")]
    pub is_from_external: bool,
    #[prost(string, tag = "15")]
    pub neighbor_ip: String,
    #[prost(bytes = "vec", tag = "20")]
    pub nlri_binary: Vec<u8>,
    #[prost(bytes = "vec", repeated, tag = "21")]
    pub pattrs_binary: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AddPathRequest {
    /// `TableType`: 0 = GLOBAL.
    #[prost(int32, tag = "1")]
    pub table_type: i32,
    #[prost(string, tag = "2")]
    pub vrf_id: String,
    #[prost(message, optional, tag = "3")]
    pub path: Option<Path>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AddPathResponse {
    #[prost(bytes = "vec", tag = "1")]
    pub uuid: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeletePathRequest {
    #[prost(int32, tag = "1")]
    pub table_type: i32,
    #[prost(string, tag = "2")]
    pub vrf_id: String,
    #[prost(message, optional, tag = "3")]
    pub family: Option<Family>,
    #[prost(message, optional, tag = "4")]
    pub path: Option<Path>,
}

/// `AddPathStreamRequest`: many paths in one message of a client stream.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AddPathStreamRequest {
    #[prost(int32, tag = "1")]
    pub table_type: i32,
    #[prost(string, tag = "2")]
    pub vrf_id: String,
    #[prost(message, repeated, tag = "3")]
    pub paths: Vec<Path>,
}

/// `google.protobuf.Empty`, and `GetBgpRequest` (no fields either).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Global {
    #[prost(uint32, tag = "1")]
    pub asn: u32,
    #[prost(string, tag = "2")]
    pub router_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GetBgpResponse {
    #[prost(message, optional, tag = "1")]
    pub global: Option<Global>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPathRequest {
    #[prost(int32, tag = "1")]
    pub table_type: i32,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, optional, tag = "3")]
    pub family: Option<Family>,
    #[prost(bool, tag = "9")]
    pub enable_only_binary: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Destination {
    #[prost(string, tag = "1")]
    pub prefix: String,
    #[prost(message, repeated, tag = "2")]
    pub paths: Vec<Path>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPathResponse {
    #[prost(message, optional, tag = "1")]
    pub destination: Option<Destination>,
}

/// `WatchEventRequest` with only its `table` (field 2): filters of type BEST (0).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchEventRequest {
    #[prost(message, optional, tag = "2")]
    pub table: Option<WatchTable>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchTable {
    #[prost(message, repeated, tag = "1")]
    pub filters: Vec<WatchFilter>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchFilter {
    /// 0 = BEST: a best path changed.
    #[prost(int32, tag = "1")]
    pub kind: i32,
    #[prost(bool, tag = "2")]
    pub init: bool,
}

/// `WatchEventResponse`: only its `table` event (field 3), the paths whose best changed.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchEventResponse {
    #[prost(message, optional, tag = "3")]
    pub table: Option<TableEvent>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TableEvent {
    #[prost(message, repeated, tag = "2")]
    pub paths: Vec<Path>,
}

/// L2VPN EVPN.
pub fn evpn() -> Family {
    Family {
        afi: i32::from(crate::route::AFI_L2VPN),
        safi: i32::from(crate::route::SAFI_EVPN),
    }
}

const TABLE_GLOBAL: i32 = 0;
const DEADLINE: Duration = Duration::from_secs(5);
const MAX_MESSAGE: usize = 256 << 20;

/// Why a call failed: the connection, or gobgpd's answer.
#[derive(Debug, thiserror::Error)]
pub enum GobgpError {
    #[error("gobgpd at {addr}: cannot connect: {detail}")]
    Connect { addr: String, detail: String },
    #[error("gobgpd at {addr}: {call}: {status}")]
    Call {
        addr: String,
        call: &'static str,
        status: String,
    },
}

/// A connection to gobgpd's API.
#[derive(Debug)]
pub struct Gobgp {
    addr: String,
    rt: tokio::runtime::Runtime,
    grpc: tonic::client::Grpc<tonic::transport::Channel>,
}

impl Gobgp {
    /// Connects to `addr` (`HOST:PORT`); every call has a deadline.
    pub fn connect(addr: &str) -> Result<Gobgp, GobgpError> {
        Gobgp::connect_with(addr, Some(DEADLINE))
    }

    /// Connects for [`Gobgp::watch`]: a stream that lasts, so no deadline per call.
    pub fn connect_watch(addr: &str) -> Result<Gobgp, GobgpError> {
        Gobgp::connect_with(addr, None)
    }

    fn connect_with(addr: &str, deadline: Option<Duration>) -> Result<Gobgp, GobgpError> {
        let err = |d: &dyn std::fmt::Display| GobgpError::Connect {
            addr: addr.to_string(),
            detail: d.to_string(),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| err(&e))?;
        let mut endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| err(&e))?
            .connect_timeout(DEADLINE);
        if let Some(d) = deadline {
            endpoint = endpoint.timeout(d);
        }
        let channel = rt.block_on(endpoint.connect()).map_err(|e| err(&e))?;
        Ok(Gobgp {
            addr: addr.to_string(),
            rt,
            // A watch event or a streamed answer can hold many paths (typed, larger than
            // their bytes): more than tonic's default 4 MiB a message.
            grpc: tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_MESSAGE),
        })
    }

    fn unary<Q, R>(&mut self, call: &'static str, req: Q) -> Result<R, GobgpError>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let path = PathAndQuery::from_static(call);
        let grpc = &mut self.grpc;
        let r = self.rt.block_on(async {
            grpc.ready()
                .await
                .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            let codec: tonic::codec::ProstCodec<Q, R> = tonic::codec::ProstCodec::default();
            grpc.unary(tonic::Request::new(req), path, codec).await
        });
        r.map(|r| r.into_inner())
            .map_err(|s| self.call_error(call, &s))
    }

    fn call_error(&self, call: &'static str, s: &tonic::Status) -> GobgpError {
        GobgpError::Call {
            addr: self.addr.clone(),
            call,
            status: format!("{:?}: {}", s.code(), s.message()),
        }
    }

    /// The local AS number (`GetBgp`).
    pub fn asn(&mut self) -> Result<u32, GobgpError> {
        let r: GetBgpResponse = self.unary("/apipb.GobgpApi/GetBgp", Empty {})?;
        Ok(r.global.map(|g| g.asn).unwrap_or_default())
    }

    /// The router id (`GetBgp`; `None` when it is not set or not an IPv4 address).
    pub fn router_id(&mut self) -> Result<Option<std::net::Ipv4Addr>, GobgpError> {
        let r: GetBgpResponse = self.unary("/apipb.GobgpApi/GetBgp", Empty {})?;
        Ok(r.global
            .and_then(|g| g.router_id.parse().ok())
            .filter(|a: &std::net::Ipv4Addr| !a.is_unspecified()))
    }

    /// Originates a route in the global RIB (an existing one of the same NLRI is replaced).
    pub fn add_path(&mut self, nlri: Vec<u8>, attrs: Vec<Vec<u8>>) -> Result<(), GobgpError> {
        let req = AddPathRequest {
            table_type: TABLE_GLOBAL,
            vrf_id: String::new(),
            path: Some(Path {
                family: Some(evpn()),
                nlri_binary: nlri,
                pattrs_binary: attrs,
                ..Path::default()
            }),
        };
        let _: AddPathResponse = self.unary("/apipb.GobgpApi/AddPath", req)?;
        Ok(())
    }

    /// Originates many routes (NLRI, attributes) at once: `AddPathStream`, in messages of
    /// up to 1000 paths (the benchmark's injector).
    pub fn add_paths(&mut self, routes: Vec<(Vec<u8>, Vec<Vec<u8>>)>) -> Result<(), GobgpError> {
        let call = "/apipb.GobgpApi/AddPathStream";
        let mut msgs = Vec::new();
        let mut paths = Vec::new();
        for (nlri, attrs) in routes {
            paths.push(Path {
                family: Some(evpn()),
                nlri_binary: nlri,
                pattrs_binary: attrs,
                ..Path::default()
            });
            if paths.len() == 1000 {
                msgs.push(std::mem::take(&mut paths));
            }
        }
        if !paths.is_empty() {
            msgs.push(paths);
        }
        let reqs: Vec<AddPathStreamRequest> = msgs
            .into_iter()
            .map(|paths| AddPathStreamRequest {
                table_type: TABLE_GLOBAL,
                vrf_id: String::new(),
                paths,
            })
            .collect();
        let grpc = &mut self.grpc;
        let r = self.rt.block_on(async {
            grpc.ready()
                .await
                .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            let codec: tonic::codec::ProstCodec<AddPathStreamRequest, Empty> =
                tonic::codec::ProstCodec::default();
            grpc.client_streaming(
                tonic::Request::new(tokio_stream::iter(reqs)),
                PathAndQuery::from_static(call),
                codec,
            )
            .await
        });
        r.map(|_| ()).map_err(|s| self.call_error(call, &s))
    }

    /// Withdraws every EVPN route this speaker originated (`DeletePath` with the family
    /// and no path: the benchmark's injector).
    pub fn delete_all(&mut self) -> Result<(), GobgpError> {
        let req = DeletePathRequest {
            table_type: TABLE_GLOBAL,
            vrf_id: String::new(),
            family: Some(evpn()),
            path: None,
        };
        let _: Empty = self.unary("/apipb.GobgpApi/DeletePath", req)?;
        Ok(())
    }

    /// Withdraws a route this speaker originated.
    pub fn delete_path(&mut self, nlri: Vec<u8>) -> Result<(), GobgpError> {
        let req = DeletePathRequest {
            table_type: TABLE_GLOBAL,
            vrf_id: String::new(),
            family: Some(evpn()),
            path: Some(Path {
                family: Some(evpn()),
                is_withdraw: true,
                nlri_binary: nlri,
                ..Path::default()
            }),
        };
        let _: Empty = self.unary("/apipb.GobgpApi/DeletePath", req)?;
        Ok(())
    }

    /// A server-streaming call: `each` gets every message until it returns `false` or the
    /// stream ends or fails.
    fn stream<Q, R>(
        &mut self,
        call: &'static str,
        req: Q,
        mut each: impl FnMut(R) -> bool,
    ) -> Result<(), GobgpError>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let grpc = &mut self.grpc;
        let r = self.rt.block_on(async {
            grpc.ready()
                .await
                .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            let codec: tonic::codec::ProstCodec<Q, R> = tonic::codec::ProstCodec::default();
            let mut stream = grpc
                .server_streaming(
                    tonic::Request::new(req),
                    PathAndQuery::from_static(call),
                    codec,
                )
                .await?
                .into_inner();
            while let Some(m) = stream.message().await? {
                if !each(m) {
                    break;
                }
            }
            Ok::<_, tonic::Status>(())
        });
        r.map_err(|s| self.call_error(call, &s))
    }

    /// Streams `WatchEvent` (best-path changes, any family) and calls `each` with every
    /// message's paths, until it returns `false` or the stream ends or fails (then returns,
    /// for the caller to reconnect and read the RIB whole). The first message is the table's
    /// best paths then (`init`): it says the watch is registered — gobgpd sends nothing, not
    /// even its headers, before a first message. gobgpd 3.10 sends these paths typed only
    /// (no `nlri_binary`): [`crate::typed::path`] reads them; they are best paths (their
    /// `best` is not set), or withdrawals (`is_withdraw`: the key has no path left).
    pub fn watch(&mut self, mut each: impl FnMut(Vec<Path>) -> bool) -> Result<(), GobgpError> {
        let req = WatchEventRequest {
            table: Some(WatchTable {
                filters: vec![WatchFilter {
                    kind: 0,
                    init: true,
                }],
            }),
        };
        self.stream(
            "/apipb.GobgpApi/WatchEvent",
            req,
            |m: WatchEventResponse| each(m.table.map(|t| t.paths).unwrap_or_default()),
        )
    }

    /// Every EVPN path of the global RIB (local and received, best or not).
    pub fn list_paths(&mut self) -> Result<Vec<Path>, GobgpError> {
        let req = ListPathRequest {
            table_type: TABLE_GLOBAL,
            name: String::new(),
            family: Some(evpn()),
            enable_only_binary: true,
        };
        let mut out = Vec::new();
        self.stream("/apipb.GobgpApi/ListPath", req, |m: ListPathResponse| {
            if let Some(d) = m.destination {
                out.extend(d.paths);
            }
            true
        })?;
        Ok(out)
    }
}

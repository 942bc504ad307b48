//! The request layer's wire protocol on top of P2P messages.
//!
//! Every message is a [`tsunagi_p2p::Header`] plus payload. Field use per kind:
//!
//! | kind | src | tag | context | len | cookie | payload |
//! |---|---|---|---|---|---|---|
//! | EAGER | sender | tag | context | message bytes | sender request (for SYNC_ACK) | the data |
//! | RTS | sender | tag | context | message bytes | sender request | 8-byte address if FLAG_CMA |
//! | CTS | receiver | - | - | receiver request | sender request | - |
//! | DATA | sender | - | - | byte offset | receiver request | a chunk |
//! | FIN | receiver | - | - | - | sender request | - |
//! | SYNC_ACK | receiver | - | - | - | sender request | - |
//!
//! EAGER and RTS take part in matching and keep MPI's non-overtaking order because the
//! transports keep per-peer order and the request layer never reorders them. The others are
//! addressed by cookie and may overtake anything.
//!
//! Rendezvous: the sender announces (RTS). If the transport offers single copy and the
//! sender's data sits in one piece of memory (the user's buffer, or a packed copy), the RTS
//! carries its address and the receiver, once matched, reads it directly (CMA) and answers
//! FIN. Otherwise the receiver answers CTS and the sender streams DATA chunks of at most the
//! transport's `max_payload()` bytes, packing non-contiguous data chunk by chunk.

/// Eager message: data travels with the envelope.
pub const EAGER: u8 = 1;
/// Rendezvous request-to-send.
pub const RTS: u8 = 2;
/// Rendezvous clear-to-send: stream the data.
pub const CTS: u8 = 3;
/// Rendezvous data chunk.
pub const DATA: u8 = 4;
/// Rendezvous finished: the receiver has read the data by itself.
pub const FIN: u8 = 5;
/// A synchronous-mode eager send was matched.
pub const SYNC_ACK: u8 = 6;

/// EAGER: the sender waits for SYNC_ACK (MPI_Ssend).
pub const FLAG_SYNC: u8 = 1;
/// RTS: the payload holds the address of the sender's contiguous data.
pub const FLAG_CMA: u8 = 2;

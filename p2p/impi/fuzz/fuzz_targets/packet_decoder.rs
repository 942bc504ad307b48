//! Arbitrary bytes into the packet header decoder, the stream splitter and a link.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tsunagi_impi::fuzzing::packet_decoder(data));

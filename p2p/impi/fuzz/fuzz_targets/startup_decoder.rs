//! Arbitrary bytes into the start-up command decoders and the server state machine.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tsunagi_impi::fuzzing::startup_decoder(data));

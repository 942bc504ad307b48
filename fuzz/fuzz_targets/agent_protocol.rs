#![no_main]
//! See `tsunagi_launcher::fuzzing::agent_protocol`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tsunagi_launcher::fuzzing::agent_protocol(data));

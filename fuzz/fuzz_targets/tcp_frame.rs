#![no_main]
//! See `tsunagi_launcher::fuzzing::tcp_frame`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tsunagi_launcher::fuzzing::tcp_frame(data));

#![no_main]
//! See `tsunagi_launcher::fuzzing::tcp_hello`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tsunagi_launcher::fuzzing::tcp_hello(data));

#![no_main]
//! See `tsunagi_launcher::fuzzing::pmi_server`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tsunagi_launcher::fuzzing::pmi_server(data));

#![no_main]
//! See `tsunagi_pm::fuzzing::pm_packet`.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tsunagi_pm::fuzzing::pm_packet(data));

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| nodemedic_fuzz_logic::lsm(data));

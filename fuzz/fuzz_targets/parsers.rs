//! Every parser of `nodemedic_fuzz_logic::TARGETS` through one libFuzzer binary: each run
//! fuzzes the target that `NODEMEDIC_FUZZ_TARGET` names, with that target's corpus
//! (tests/fuzz.sh). A parser is fuzzed by adding its entry point to `TARGETS` and seeds to
//! `fuzz/corpus/<target>/`; nothing here changes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| (nodemedic_fuzz_logic::selected())(data));

#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| quantykube_fuzz_targets::etcd_wal(data));
